//! Small files are written to memory first and uploaded together.
//!
//! A snapshot needs three objects in storage before the catalog may see it: the data
//! files, a manifest listing them and a manifest list. Each depends on the previous
//! one's size and statistics, so written in place they cost three storage round trips in
//! a row, on every commit. Encoded to memory instead, all three are known at once and
//! their uploads run side by side: one round trip. The group-commit cycle (callers wait
//! for their snapshot) is what this shortens. Large groups are not staged: their data
//! files stream to storage as they are encoded, overlapping the previous commit.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream};
use iceberg::io::FileIO;

use crate::error::Result;

/// Data of a group up to this many input bytes is staged in memory; larger groups'
/// files are written in place.
pub(crate) const STAGE_MAX_INPUT_BYTES: usize = 16 << 20;

/// A file encoded in memory, waiting for its upload.
pub struct StagedFile {
    pub path: String,
    pub bytes: Bytes,
}

/// Scratch storage under the files' final paths. Each use (a group's data files, a
/// commit attempt's metadata) takes a fresh one, dropped with whatever a failure left.
pub struct Staging {
    scratch: FileIO,
}

impl Default for Staging {
    fn default() -> Self {
        Staging {
            scratch: FileIO::new_with_memory(),
        }
    }
}

impl Staging {
    /// Where to write files that are to be staged.
    pub fn io(&self) -> &FileIO {
        &self.scratch
    }

    /// Takes the files at `paths` out of scratch storage.
    pub async fn take(&self, paths: Vec<String>) -> Result<Vec<StagedFile>> {
        let mut files = Vec::new();
        for path in paths {
            let bytes = self.scratch.new_input(&path)?.read().await?;
            self.scratch.delete(&path).await?;
            files.push(StagedFile { path, bytes });
        }
        Ok(files)
    }
}

/// Uploads `files` to their paths in `file_io`, [`MAX_CONCURRENT_UPLOADS`] at a time
/// (an upsert spread over thousands of data files stages a delete file or a rewrite for
/// each: all at once would meet the store's request limits).
pub async fn upload(file_io: &FileIO, files: &[StagedFile]) -> Result<()> {
    // Each upload owns what it needs: a stream of futures borrowing `files` would make
    // the commit stage's future lose `Send`.
    let uploads = files.iter().map(|f| {
        let (io, path, bytes) = (file_io.clone(), f.path.clone(), f.bytes.clone());
        async move {
            io.new_output(&path)?.write(bytes).await?;
            Ok::<_, crate::error::Error>(())
        }
    });
    stream::iter(uploads.collect::<Vec<_>>())
        .buffer_unordered(MAX_CONCURRENT_UPLOADS)
        .try_collect::<()>()
        .await
}

/// Uploads of one attempt in flight at once.
const MAX_CONCURRENT_UPLOADS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn staged_files_land_under_their_paths_and_leave_scratch() {
        let dir = tempfile::tempdir().unwrap();
        let target = FileIO::new_with_fs();
        let staging = Staging::default();
        let paths: Vec<String> = (0..3)
            .map(|i| format!("file://{}/f{i}", dir.path().display()))
            .collect();
        for (i, p) in paths.iter().enumerate() {
            let bytes = Bytes::from(vec![i as u8; 10 + i]);
            staging
                .io()
                .new_output(p)
                .unwrap()
                .write(bytes)
                .await
                .unwrap();
        }
        let files = staging.take(paths.clone()).await.unwrap();
        upload(&target, &files).await.unwrap();
        for (i, p) in paths.iter().enumerate() {
            let read = target.new_input(p).unwrap().read().await.unwrap();
            assert_eq!(read, Bytes::from(vec![i as u8; 10 + i]));
            assert!(
                !staging.io().exists(p).await.unwrap(),
                "scratch keeps nothing"
            );
        }
    }
}
