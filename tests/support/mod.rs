//! Helpers shared by the integration tests: running the independent Python readers.

#![allow(dead_code)]

use std::process::Command;

use serde_json::Value;

/// Runs `tests/support/read_table.py` and returns its JSON answer.
pub fn read_back(reader: &str, args: Value) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/read_table.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .arg(script)
        .arg(reader)
        .arg(args.to_string())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{reader} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reader prints JSON")
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
