//! Local files (`file:/` paths) read and written with one system call each.
//!
//! iceberg-storage-opendal goes through opendal's fs service, which reads a file into a
//! 2 MiB buffer, a chunk per trip to tokio's blocking pool, and hands back a slice of it
//! (the slice keeps the whole 2 MiB alive for as long as floe holds it: a quarter of
//! copy-on-write's peak in the in-flight bench, 2026-12-07); copying it into a buffer of
//! its own length cost a second copy. A copy-on-write commit reads a file whole and
//! writes its spliced copy: through opendal that was about 0.6 ms of CPU per 1 MiB file
//! read (perf, 2026-12-07), for what one `read` into a buffer of the file's length does.
//! Here a read fills a buffer of exactly its length, and a write is one `write` and an
//! `fsync` (of the file, and of each folder it made: a commit may name the file next);
//! a streamed write (a manifest list) is gathered and written so on close. Errors read
//! as opendal's do. The rest (listing, deleting, `exists`) goes through
//! iceberg-storage-opendal.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use iceberg::io::{FileRead, FileWrite};
use iceberg::{Error, ErrorKind, Result};

/// Whether `path` names a file on the local filesystem, in a form read here
/// (iceberg-storage-opendal maps a `file:` path without its slash elsewhere).
pub(super) fn is_local(path: &str) -> bool {
    path.starts_with("file:/")
}

/// The filesystem path of a `file:/` path (see [`crate::config::local_folder`]).
fn os_path(path: &str) -> PathBuf {
    crate::config::local_folder(path)
}

/// `e` as opendal's fs service reports it (kind, retryability, operation and path), so
/// that floe tells a local failure in the same one line as any other storage's (see
/// `crate::error::describe_storage`), e.g. `storage write of /data/wh/t/data/a.parquet
/// failed: no storage space: No space left on device (os error 28)`.
fn failed(operation: &'static str, path: &str, e: std::io::Error) -> Error {
    let storage = opendal::raw::new_std_io_error(e)
        .with_operation(operation)
        .with_context("service", "fs")
        .with_context("path", os_path(path).display());
    Error::new(ErrorKind::Unexpected, "Failure in doing io operation").with_source(storage)
}

/// Runs filesystem work on tokio's blocking pool, as opendal's fs service does.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))
}

/// The whole file, in a buffer of its length.
pub(super) async fn read(path: &str) -> Result<Bytes> {
    let at = os_path(path);
    blocking(move || std::fs::read(at))
        .await
        .map(Bytes::from)
        .map_err(|e| failed("read", path, e))
}

/// `bytes` as the whole file at `path`, on disk before this returns: the file and every
/// folder made for it are synced (a commit may name the file next).
pub(super) async fn write(path: &str, bytes: Bytes) -> Result<()> {
    let at = os_path(path);
    blocking(move || {
        let made = folders_made_for(&at)?;
        let mut file = std::fs::File::create(&at)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        file.sync_all()?;
        // An entry lives in its folder: the file's and each new folder's, so every
        // folder made and the one that held the outermost, from the deepest up.
        if let Some(outermost) = made.first() {
            for folder in made
                .iter()
                .rev()
                .map(PathBuf::as_path)
                .chain(outermost.parent())
            {
                std::fs::File::open(folder)?.sync_all()?;
            }
        }
        Ok(())
    })
    .await
    .map_err(|e| failed("write", path, e))
}

/// Makes the folders `file` needs; those it made, from the outermost in.
fn folders_made_for(file: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut folder = file.parent();
    while let Some(f) = folder {
        if f.as_os_str().is_empty() || f.is_dir() {
            break;
        }
        missing.push(f.to_path_buf());
        folder = f.parent();
    }
    missing.reverse();
    if let Some(innermost) = missing.last() {
        std::fs::create_dir_all(innermost)?;
    }
    Ok(missing)
}

/// A writer that gathers what it is given and writes it whole on `close` (see
/// [`write`]): floe streams only manifest lists this way, which are small, and a writer
/// dropped unclosed leaves no partial file behind.
pub(super) fn writer(path: &str) -> Box<dyn FileWrite> {
    Box::new(LocalWriter {
        path: path.to_string(),
        gathered: Some(Vec::new()),
    })
}

struct LocalWriter {
    path: String,
    /// `None` once closed.
    gathered: Option<Vec<u8>>,
}

#[async_trait::async_trait]
impl FileWrite for LocalWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        match self.gathered.as_mut() {
            Some(gathered) => {
                gathered.extend_from_slice(&bytes);
                Ok(())
            }
            None => Err(closed(&self.path)),
        }
    }

    async fn close(&mut self) -> Result<()> {
        match self.gathered.take() {
            Some(gathered) => write(&self.path, Bytes::from(gathered)).await,
            None => Err(closed(&self.path)),
        }
    }
}

fn closed(path: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{path} was written to after it was closed"),
    )
}

/// A reader of ranges of a local file, each read into a buffer of its own length.
pub(super) async fn reader(path: &str) -> Result<Box<dyn FileRead>> {
    let at = os_path(path);
    let (file, len) = blocking(move || {
        let file = std::fs::File::open(at)?;
        let len = file.metadata()?.len();
        Ok((file, len))
    })
    .await
    .map_err(|e| failed("reader", path, e))?;
    Ok(Box::new(LocalReader {
        file: Arc::new(file),
        len,
        path: path.to_string(),
    }))
}

struct LocalReader {
    file: Arc<std::fs::File>,
    /// The file's length when opened: a range past it (a footer that names bytes the
    /// file does not have) is refused before a buffer is made for it.
    len: u64,
    path: String,
}

#[async_trait::async_trait]
impl FileRead for LocalReader {
    async fn read(&self, range: std::ops::Range<u64>) -> Result<Bytes> {
        if range.start > range.end || range.end > self.len {
            let e = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "bytes {}..{} asked of a file of {} bytes",
                    range.start, range.end, self.len
                ),
            );
            return Err(failed("read", &self.path, e));
        }
        let file = self.file.clone();
        let len = (range.end - range.start) as usize;
        blocking(move || {
            let mut buffer = vec![0u8; len];
            file.read_exact_at(&mut buffer, range.start)?;
            Ok(Bytes::from(buffer))
        })
        .await
        .map_err(|e| failed("read", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_paths_are_local() {
        assert!(is_local("file:///tmp/wh/f.parquet"));
        assert!(is_local("file:/tmp/wh/f.parquet"));
        // opendal reads this one elsewhere (`/ile:x`): left to it, not read here.
        assert!(!is_local("file:x/f.parquet"));
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

    #[test]
    fn file_paths_resolve_from_the_root_however_they_are_written() {
        for path in ["file:/tmp/wh/f", "file://tmp/wh/f", "file:///tmp/wh/f"] {
            assert_eq!(os_path(path), PathBuf::from("/tmp/wh/f"), "{path}");
        }
    }

    #[tokio::test]
    async fn a_write_makes_its_folders_and_replaces_a_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = format!("file://{}/a/b/f.bin", dir.path().display());
        let io = super::super::build_file_io(Default::default());
        let output = io.new_output(&path).unwrap();
        output
            .write(Bytes::from_static(b"longer first"))
            .await
            .unwrap();
        output.write(Bytes::from_static(b"short")).await.unwrap();
        let read = io.new_input(&path).unwrap().read().await.unwrap();
        assert_eq!(read, Bytes::from_static(b"short"));
        // A streamed write lands whole on close, and nothing before.
        let mut writer = output.writer().await.unwrap();
        writer.write(Bytes::from_static(b"stream")).await.unwrap();
        writer.write(Bytes::from_static(b"ed")).await.unwrap();
        let read = io.new_input(&path).unwrap().read().await.unwrap();
        assert_eq!(read, Bytes::from_static(b"short"));
        writer.close().await.unwrap();
        let read = io.new_input(&path).unwrap().read().await.unwrap();
        assert_eq!(read, Bytes::from_static(b"streamed"));
        assert!(writer.write(Bytes::from_static(b"late")).await.is_err());
        assert!(writer.close().await.is_err());
    }

    #[tokio::test]
    async fn a_failed_local_write_is_one_line_naming_the_file_and_the_cause() {
        let io = super::super::build_file_io(Default::default());
        let e = io
            .new_output("file:///dev/full")
            .unwrap()
            .write(Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        let line = crate::error::Error::from(e).to_string();
        assert!(line.contains("storage write of /dev/full failed"), "{line}");
        assert!(line.contains("No space left on device"), "{line}");
    }

    #[tokio::test]
    async fn a_missing_file_or_a_range_past_its_end_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let io = super::super::build_file_io(Default::default());
        let missing = format!("file://{}/missing.parquet", dir.path().display());
        let e = io.new_input(&missing).unwrap().read().await.unwrap_err();
        assert!(e.to_string().contains("missing.parquet"), "{e}");
        let path = format!("file://{}/f.bin", dir.path().display());
        let output = io.new_output(&path).unwrap();
        output
            .write(Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
        let reader = io.new_input(&path).unwrap().reader().await.unwrap();
        assert_eq!(reader.read(8..10).await.unwrap(), Bytes::from_static(b"89"));
        let e = reader.read(8..12).await.unwrap_err();
        assert!(e.to_string().contains("f.bin"), "{e}");
        // A footer naming far more bytes than the file has: refused, not allocated.
        let e = reader.read(0..1 << 50).await.unwrap_err();
        assert!(e.to_string().contains("f.bin"), "{e}");
    }
}
