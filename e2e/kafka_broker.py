"""A real Apache Kafka broker for tests: one KRaft node (broker + controller) on 127.0.0.1.

The broker's classpath comes from Maven Central (`e2e/kafka/broker-pom.xml`, resolved once
into .e2e/kafka-<version>/lib); the node is formatted with SCRAM credentials and started
with two listeners:

  * PLAINTEXT, for most tests;
  * SASL_PLAINTEXT accepting PLAIN and SCRAM-SHA-256/512 for the user `floe`, so the
    input's SASL settings are checked by a broker that refuses wrong passwords;
  * SSL, with a certificate for 127.0.0.1 signed by a CA made here with the openssl CLI
    (`ca_file`), so the input's TLS settings are checked by a broker that needs them.

    with KafkaBroker() as kafka:
        kafka.bootstrap        # 127.0.0.1:<port>
        kafka.sasl_bootstrap   # 127.0.0.1:<port>
        kafka.tls_bootstrap, kafka.ca_file
        kafka.kill(); kafka.restart()   # a crash and a start over the same log dirs

Stopped by PID (SIGTERM, then SIGKILL); the child dies with its parent.
"""
import base64
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

from services import STATE, HERE, die_with_parent, free_ports

KAFKA_VERSION = "4.1.1"
SASL_USER = "floe"
SASL_PASSWORD = "floe-kafka-secret"

LOG4J2 = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
"""


def kafka_lib() -> str:
    """The broker's jars, resolved from Maven Central on first use."""
    lib = os.path.join(STATE, f"kafka-{KAFKA_VERSION}", "lib")
    done = os.path.join(lib, ".complete")
    if not os.path.exists(done):
        shutil.rmtree(lib, ignore_errors=True)
        os.makedirs(lib)
        subprocess.check_call([
            "mvn", "-q", "-f", os.path.join(HERE, "kafka", "broker-pom.xml"),
            "dependency:copy-dependencies", f"-DoutputDirectory={lib}",
        ])
        open(done, "w").close()
    return lib


def cluster_id() -> str:
    """A random cluster id as Kafka makes them: base64 of a UUID, never starting with "-",
    which the storage tool takes for an option and fails on (one start in 64)."""
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster.startswith("-"):
            return cluster


def java_cmd(lib: str, main: str, *args, heap="-Xmx512m") -> list:
    return ["java", heap, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
            "-cp", os.path.join(lib, "*"), main, *args]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class KafkaBroker:
    def __init__(self, partitions: int = 4):
        self.partitions = partitions
        self.proc = None
        self.dir = None
        self.log = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        lib = kafka_lib()
        os.makedirs(STATE, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="kafka-", dir=STATE)
        self.port, self.sasl_port, self.tls_port, self.controller_port = free_ports(4)
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}"
        self.tls_bootstrap = f"127.0.0.1:{self.tls_port}"
        self._make_certificates()
        self.config = os.path.join(self.dir, "server.properties")
        with open(self.config, "w") as f:
            f.write(self._properties())
        with open(os.path.join(self.dir, "log4j2.yaml"), "w") as f:
            f.write(LOG4J2)
        cluster = cluster_id()
        scram = [a for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                 for a in ("--add-scram", f"{m}=[name={SASL_USER},password={SASL_PASSWORD}]")]
        fmt = subprocess.run(java_cmd(lib, "kafka.tools.StorageTool", "format", "--standalone",
                                      "-t", cluster, "-c", self.config, *scram, heap="-Xmx256m"),
                             capture_output=True, text=True, env=self._env())
        if fmt.returncode != 0:
            raise RuntimeError(f"formatting the Kafka log dir failed ({fmt.returncode}):\n"
                               f"{fmt.stdout[-2000:]}\n{fmt.stderr[-2000:]}")
        self._spawn(lib)
        self._wait_ready()
        return self

    def _make_certificates(self):
        """A CA and a server certificate for 127.0.0.1; Kafka reads the key and chain as PEM."""
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

        def openssl(*args):
            done = subprocess.run(["openssl", *args], cwd=self.dir, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"openssl {args[0]} failed: {done.stderr[-2000:]}")

        openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                "-subj", "/CN=floe kafka test CA", "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
        with open(os.path.join(self.dir, "server.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                    "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext")
        self.ca_file = os.path.join(self.dir, "ca.pem")
        self.keystore = os.path.join(self.dir, "server-keystore.pem")
        with open(self.keystore, "w") as out:
            for part in ("server.key", "server.pem"):
                out.write(open(os.path.join(self.dir, part)).read())

    def _env(self):
        return {**os.environ, "KAFKA_LOG4J_OPTS": "",
                "JAVA_TOOL_OPTIONS": f"-Dlog4j2.configurationFile={os.path.join(self.dir, 'log4j2.yaml')}"}

    def _properties(self) -> str:
        jaas_plain = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                      f'user_{SASL_USER}="{SASL_PASSWORD}";')
        jaas_scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"SSL://127.0.0.1:{self.tls_port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"SSL://127.0.0.1:{self.tls_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL",
            "listener.name.ssl.ssl.keystore.type=PEM",
            f"listener.name.ssl.ssl.keystore.location={self.keystore}",
            "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas_plain}",
            f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={jaas_scram}",
            f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={jaas_scram}",
            f"log.dirs={os.path.join(self.dir, 'data')}",
            f"num.partitions={self.partitions}",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "",
        ])

    def _spawn(self, lib):
        self.log = os.path.join(self.dir, "kafka.log")
        self.args = java_cmd(lib, "kafka.Kafka", self.config)
        self.proc = subprocess.Popen(self.args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT,
                                     env=self._env(), start_new_session=True,
                                     preexec_fn=die_with_parent)
        self.pid = self.proc.pid

    def _wait_ready(self, timeout=90):
        """Ready when both listeners accept connections and the broker answers metadata."""
        from confluent_kafka.admin import AdminClient
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited early; log:\n{open(self.log).read()[-3000:]}")
            if all(port_open("127.0.0.1", p) for p in (self.port, self.sasl_port, self.tls_port)):
                try:
                    md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=3)
                    if md.brokers:
                        return
                except Exception:
                    pass
            time.sleep(0.3)
        raise RuntimeError(f"kafka not ready after {timeout}s; log:\n{open(self.log).read()[-3000:]}")

    def kill(self):
        """SIGKILL, as a crash: the log dirs stay for `restart`."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def restart(self, timeout=90):
        self.kill()
        self._spawn(kafka_lib())
        self._wait_ready(timeout)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        if self.dir and not os.environ.get("FLOE_KEEP_SERVICE_LOGS"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # Helpers for tests ---------------------------------------------------------------

    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name, partitions=None):
        from confluent_kafka.admin import NewTopic
        admin = self.admin()  # kept alive until the futures resolve
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions or self.partitions, replication_factor=1)])
        for f in futures.values():
            f.result(timeout=30)

    def produce(self, topic, records, partition_of=None, headers_of=None):
        """Produces (key, value) pairs, waiting for every acknowledgement; returns
        {(partition, offset): value}. `partition_of(i)` and `headers_of(i)` (a list of
        (name, bytes)) set the i-th record's partition and headers."""
        from confluent_kafka import Producer
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                             "enable.idempotence": True, "acks": "all"})
        placed, errors = {}, []

        def done(err, msg):
            if err:
                errors.append(err)
            else:
                placed[(msg.partition(), msg.offset())] = msg.value()

        for i, (key, value) in enumerate(records):
            kwargs = {"key": key, "value": value, "on_delivery": done}
            if partition_of is not None:
                kwargs["partition"] = partition_of(i)
            if headers_of is not None:
                kwargs["headers"] = headers_of(i)
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        producer.flush(60)
        assert not errors, errors[:3]
        assert len(placed) == len(records), (len(placed), len(records))
        return placed

    def committed(self, group, topic):
        """The group's committed offset per partition of `topic` ({} before any commit)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        admin = self.admin()  # kept alive until the futures resolve
        md = admin.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p) for p in md.topics[topic].partitions]
        futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, parts)])
        out = {}
        for f in futures.values():
            for tp in f.result(timeout=30).topic_partitions:
                if tp.offset >= 0:
                    out[tp.partition] = tp.offset
        return out


if __name__ == "__main__":
    # A quick check by hand: starts, produces, prints the bootstrap address, stops.
    started = time.monotonic()
    with KafkaBroker() as k:
        print("ready in", round(time.monotonic() - started, 1), "s at", k.bootstrap, k.sasl_bootstrap)
        k.create_topic("smoke")
        print(len(k.produce("smoke", [(b"k", b"v%d" % i) for i in range(1000)])), "records")
        print(glob.glob(os.path.join(k.dir, "data", "*"))[:3])
        started = time.monotonic()
        k.restart()
        print("restarted in", round(time.monotonic() - started, 1), "s")
