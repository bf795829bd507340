//! Local files read at their own size.
//!
//! iceberg-storage-opendal reads a local file (`file:` paths) through opendal's fs
//! service, which fills each read into a 2 MiB buffer and hands back a slice of it: the
//! slice keeps the whole 2 MiB alive for as long as floe holds it. A 300 KB data file
//! spliced by copy-on-write, or the footer and key column of each file an upsert looks
//! up, each held 2 MiB (in-flight bench, 2026-12-07: a quarter of copy-on-write's peak).
//! Reads here are copied into buffers of their own length, so what floe holds is what
//! it read; the copy costs about what reading the bytes from the page cache did.

use bytes::Bytes;
use iceberg::Result;
use iceberg::io::FileRead;

/// Whether iceberg-storage-opendal reads `path` from the local filesystem.
pub(super) fn is_local(path: &str) -> bool {
    path.starts_with("file:")
}

/// `bytes` in a buffer of their own length.
pub(super) fn exact(bytes: Bytes) -> Bytes {
    Bytes::copy_from_slice(&bytes)
}

/// A local file's reader whose reads come back in buffers of their own length.
pub(super) struct ExactReader(pub(super) Box<dyn FileRead>);

#[async_trait::async_trait]
impl FileRead for ExactReader {
    async fn read(&self, range: std::ops::Range<u64>) -> Result<Bytes> {
        Ok(exact(self.0.read(range).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_paths_are_local() {
        assert!(is_local("file:///tmp/wh/f.parquet"));
        assert!(!is_local("s3://lake/f"));
        assert!(!is_local("memory:/f"));
    }

    /// Whether `bytes` own a buffer of exactly their length: not a slice of a larger
    /// one, nor shared with anything else.
    fn owns_exactly(bytes: Bytes) -> bool {
        let len = bytes.len();
        bytes.try_into_mut().is_ok_and(|b| b.capacity() == len)
    }

    #[tokio::test]
    async fn local_reads_hold_no_more_than_they_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("file://{}/f.bin", dir.path().display());
        let io = super::super::build_file_io(Default::default());
        let content: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        io.new_output(&path)
            .unwrap()
            .write(Bytes::from(content.clone()))
            .await
            .unwrap();
        let input = io.new_input(&path).unwrap();
        let whole = input.read().await.unwrap();
        assert_eq!(whole, content);
        let reader = input.reader().await.unwrap();
        let range = reader.read(10..20).await.unwrap();
        assert_eq!(range, content[10..20]);
        assert!(owns_exactly(whole), "a whole read");
        assert!(owns_exactly(range), "a range read");
    }
}
