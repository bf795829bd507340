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
//! `fsync` (of the file, its folder and each folder it made: a commit may name the file
//! next); a streamed write (a Parquet file) goes to the file in pieces of a few MiB. Errors read
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

/// `bytes` as the whole file at `path`, on disk before this returns: the file and its
/// folder are synced, and each folder made for it (a commit may name the file next).
pub(super) async fn write(path: &str, bytes: Bytes) -> Result<()> {
    let at = os_path(path);
    blocking(move || {
        let mut file = create(&at)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        sync(&file, &at)
    })
    .await
    .map_err(|e| failed("write", path, e))
}

/// A new file at `at`, with the folders it needs. Each folder made for it has its entry
/// synced at once, deepest first: another writer may put a file in it and commit
/// before this one closes.
fn create(at: &Path) -> std::io::Result<std::fs::File> {
    let made = folders_made_for(at)?;
    let file = std::fs::File::create(at)?;
    // A made folder's entry is in the folder above it.
    for folder in at.ancestors().skip(2).take(made) {
        sync_folder(folder)?;
    }
    Ok(file)
}

/// Syncs `file` (at `at`), then its folder, which holds its new entry, and that
/// folder's own: a synced file whose folder is not may be gone after a crash, with a
/// catalog naming it. (The folders made for it were synced when they were made, see
/// [`create`].)
fn sync(file: &std::fs::File, at: &Path) -> std::io::Result<()> {
    file.sync_all()?;
    #[cfg(test)]
    tests::synced(at);
    // The file's folder, and the one above: a folder another writer made an instant
    // ago (a new partition) may not have its own entry synced yet.
    for folder in at.ancestors().skip(1).take(2) {
        sync_folder(folder)?;
    }
    Ok(())
}

fn sync_folder(folder: &Path) -> std::io::Result<()> {
    if folder.as_os_str().is_empty() {
        return Ok(());
    }
    std::fs::File::open(folder)?.sync_all()?;
    #[cfg(test)]
    tests::synced(folder);
    Ok(())
}

/// Makes the folders `file` needs; how many it made (a folder another writer made
/// meanwhile may count). A file where a folder should be is named as such (else the
/// error would read "File exists", as if of `file`).
fn folders_made_for(file: &Path) -> std::io::Result<usize> {
    let missing = file
        .ancestors()
        .skip(1)
        .take_while(|f| !f.as_os_str().is_empty() && !f.is_dir())
        .count();
    if let Some(folder) = file.parent().filter(|_| missing > 0) {
        std::fs::create_dir_all(folder).map_err(|e| {
            match folder.ancestors().find(|f| f.is_file()) {
                Some(f) => std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    format!("{} is a file, not a folder", f.display()),
                ),
                None => e,
            }
        })?;
    }
    Ok(missing)
}

/// A writer that streams what it is given to the file, in pieces of at least
/// [`SPILL_BYTES`] (a whole Parquet file in memory would be up to the target file size,
/// 512 MiB by default), and syncs it on `close` as [`write`] does. A small file is
/// written whole on close, in one trip to the blocking pool. A writer dropped unclosed
/// may leave a partial file at its path, which nothing references: floe names every
/// file it writes anew.
pub(super) fn writer(path: &str) -> Box<dyn FileWrite> {
    Box::new(LocalWriter {
        path: path.to_string(),
        state: Some(Streaming::default()),
    })
}

/// How much a [`LocalWriter`] gathers before it writes to the file.
const SPILL_BYTES: usize = 4 << 20;

struct LocalWriter {
    path: String,
    /// `None` once closed, or once a write to the file failed.
    state: Option<Streaming>,
}

#[derive(Default)]
struct Streaming {
    /// Bytes not yet written to the file.
    pending: Vec<u8>,
    /// The file once opened.
    file: Option<std::fs::File>,
}

impl Streaming {
    /// Writes what is pending to the file (opening it first), then syncs it if `last`.
    fn spill(mut self, at: &Path, last: bool) -> std::io::Result<Self> {
        let mut file = match self.file.take() {
            Some(open) => open,
            None => create(at)?,
        };
        std::io::Write::write_all(&mut file, &self.pending)?;
        self.pending.clear();
        if last {
            sync(&file, at)?;
        }
        self.file = Some(file);
        Ok(self)
    }
}

impl LocalWriter {
    async fn spill(&mut self, last: bool) -> Result<()> {
        let state = self.state.take().ok_or_else(|| closed(&self.path))?;
        let at = os_path(&self.path);
        let state = blocking(move || state.spill(&at, last))
            .await
            .map_err(|e| failed("write", &self.path, e))?;
        if !last {
            self.state = Some(state);
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl FileWrite for LocalWriter {
    async fn write(&mut self, bytes: Bytes) -> Result<()> {
        let state = self.state.as_mut().ok_or_else(|| closed(&self.path))?;
        state.pending.extend_from_slice(&bytes);
        if state.pending.len() >= SPILL_BYTES {
            self.spill(false).await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        self.spill(true).await
    }
}

fn closed(path: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{path} cannot be written: it was closed, or an earlier write to it failed"),
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
        // Less than a piece: written whole on close, and nothing before.
        let read = io.new_input(&path).unwrap().read().await.unwrap();
        assert_eq!(read, Bytes::from_static(b"short"));
        writer.close().await.unwrap();
        let read = io.new_input(&path).unwrap().read().await.unwrap();
        assert_eq!(read, Bytes::from_static(b"streamed"));
        assert!(writer.write(Bytes::from_static(b"late")).await.is_err());
        assert!(writer.close().await.is_err());
    }

    /// Paths `sync` synced, for the tests (each looks only under its own folder).
    static SYNCED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

    pub(super) fn synced(path: &Path) {
        SYNCED.lock().unwrap().push(path.to_path_buf());
    }

    fn synced_under(dir: &Path) -> Vec<PathBuf> {
        let synced = SYNCED.lock().unwrap();
        synced
            .iter()
            .filter(|p| p.starts_with(dir))
            .cloned()
            .collect()
    }

    #[tokio::test]
    async fn a_write_syncs_the_file_its_folder_and_each_folder_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let io = super::super::build_file_io(Default::default());
        let new = root.join("a/b/f.bin");
        let output = io.new_output(format!("file://{}", new.display())).unwrap();
        output.write(Bytes::from_static(b"x")).await.unwrap();
        // The new folders' entries as they are made, then the file and its own entry.
        let expected = [
            root.join("a"),
            root.clone(),
            new.clone(),
            root.join("a/b"),
            root.join("a"),
        ];
        assert_eq!(synced_under(&root), expected);
        // Into a folder that exists: the file and that folder (its new entry).
        let next = root.join("a/b/g.bin");
        let output = io.new_output(format!("file://{}", next.display())).unwrap();
        output.write(Bytes::from_static(b"y")).await.unwrap();
        let synced = synced_under(&root);
        assert_eq!(
            synced[expected.len()..],
            [next, root.join("a/b"), root.join("a")]
        );
        // A folder another writer made and has not synced yet: its entry is too.
        std::fs::create_dir(root.join("d")).unwrap();
        let inside = root.join("d/x.bin");
        let output = io
            .new_output(format!("file://{}", inside.display()))
            .unwrap();
        output.write(Bytes::from_static(b"z")).await.unwrap();
        let synced = synced_under(&root);
        assert_eq!(
            synced[synced.len() - 3..],
            [inside, root.join("d"), root.clone()]
        );
    }

    #[tokio::test]
    async fn a_streamed_file_goes_to_disk_as_it_grows_and_is_synced_on_close() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let at = root.join("p/big.bin");
        let io = super::super::build_file_io(Default::default());
        let output = io.new_output(format!("file://{}", at.display())).unwrap();
        let mut writer = output.writer().await.unwrap();
        let piece = Bytes::from(vec![7u8; SPILL_BYTES / 2 + 1]);
        for _ in 0..4 {
            writer.write(piece.clone()).await.unwrap();
        }
        // All four went to the file (in two pieces) before it was closed, unsynced; the
        // folder made for it has its entry synced already, for a writer that puts a
        // file there and commits first.
        let on_disk = std::fs::metadata(&at).unwrap().len() as usize;
        assert_eq!(on_disk, 4 * piece.len());
        assert_eq!(synced_under(&root), std::slice::from_ref(&root));
        writer.close().await.unwrap();
        assert_eq!(std::fs::read(&at).unwrap().len(), 4 * piece.len());
        let expected = [root.clone(), at.clone(), root.join("p"), root.clone()];
        assert_eq!(synced_under(&root), expected);
    }

    #[test]
    fn writers_making_the_same_folders_at_once_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let at = root.join(format!("p/q{}/r/f{i}", i % 4));
                std::thread::spawn(move || create(&at).map(|_| ()))
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_file_where_a_folder_should_be_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let blocking = dir.path().join("x");
        std::fs::write(&blocking, b"").unwrap();
        let io = super::super::build_file_io(Default::default());
        let path = format!("file://{}/y/f.bin", blocking.display());
        let e = io
            .new_output(&path)
            .unwrap()
            .write(Bytes::from_static(b"z"))
            .await
            .unwrap_err();
        let line = crate::error::Error::from(e).to_string();
        assert!(line.contains("is a file, not a folder"), "{line}");
        assert!(
            line.contains(&format!("{} is a file", blocking.display())),
            "{line}"
        );
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
