"""floe's Parquet files declare a `created_by` that parquet-mr's version parser accepts:
Iceberg's Java reader (Spark, Trino, Flink) ignores the binary column statistics of files
whose `created_by` does not parse, and logs a warning with a stack trace for each."""
import glob
import os
import subprocess

import pyarrow.parquet as pq
from test_floe_run import run_floe  # noqa: F401

PARQUET_COMMON = "org.apache.parquet:parquet-common:1.18.1"
HERE = os.path.dirname(os.path.abspath(__file__))

PIPELINE = """
http:
  enabled: false
input:
  generate:
    count: 10
    interval: ""
    mapping: |
      root.id = count("created_by")
      root.name = "n" + root.id.string()
output:
  iceberg:
    namespace: e2e
    table: created_by
    schema_evolution:
      enabled: true
"""


def parquet_common_jar() -> str:
    group, artifact, version = PARQUET_COMMON.split(":")
    jar = os.path.expanduser(os.path.join(
        "~/.m2/repository", *group.split("."), artifact, version, f"{artifact}-{version}.jar"))
    if not os.path.exists(jar):
        subprocess.check_call(["mvn", "-q", "dependency:get", f"-Dartifact={PARQUET_COMMON}"])
    return jar


def parse_with_parquet_mr(tmp_path, created_by: str) -> list:
    jar = parquet_common_jar()
    classes = tmp_path / "classes"
    classes.mkdir()
    subprocess.check_call(["javac", "-d", str(classes), "-cp", jar,
                           os.path.join(HERE, "java", "ParseCreatedBy.java")])
    out = subprocess.run(["java", "-cp", f"{classes}{os.pathsep}{jar}", "ParseCreatedBy", created_by],
                         capture_output=True, text=True)
    assert out.returncode == 0, f"parquet-mr cannot parse {created_by!r}: {out.stderr[-2000:]}"
    return out.stdout.strip().split("\t")


def crate_version() -> str:
    with open(os.path.join(HERE, "..", "Cargo.toml")) as f:
        return next(line.split('"')[1] for line in f if line.startswith("version"))


def test_created_by_parses_with_parquet_mr(tmp_path):
    res = run_floe(tmp_path, PIPELINE)
    assert res.returncode == 0, res.stderr[-3000:]
    files = glob.glob(str(tmp_path / "warehouse" / "**" / "*.parquet"), recursive=True)
    assert files, "no data file written"
    created_by = pq.ParquetFile(files[0]).metadata.created_by
    application, version = parse_with_parquet_mr(tmp_path, created_by)
    assert application == "floe"
    assert version == crate_version()
