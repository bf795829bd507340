//! What a commit's answer says: the new head when the catalog sent the table back,
//! else what floe can apply locally, and when to read the table again instead.

use super::*;

/// A successful commit's answer, read only as far as floe needs it. A REST catalog
/// answers with the table's whole metadata, every retained snapshot included (about 7 MB
/// at 10,000 snapshots), while the fields floe checks ([`AnswerHead`]) come before the
/// snapshots in Java's catalogs. If the body cannot be read, the commit's outcome is
/// "unknown" (see [`parse_commit_answer`]).
pub(super) struct CommitAnswer {
    /// The answer's text, as far as the checked fields.
    pub(super) read: Vec<u8>,
    /// What was read on past them, kept as received: joined only if the whole answer is
    /// needed, which it rarely is.
    pub(super) past_head: Vec<bytes::Bytes>,
    /// The body still to come; `None` once it ended or failed.
    pub(super) rest: Option<Response>,
    /// Why the body ended early, if it did while reading on past the checked fields.
    pub(super) broken: Option<Error>,
}

/// Once the checked fields are read, up to this much more of the answer is read, so a
/// small answer ends and its connection is reused. A longer one is dropped unread, and
/// its connection closed: a new connection costs less than reading megabytes.
pub(super) const READ_ON_AFTER_HEAD: usize = 256 << 10;

/// Less than a retained snapshot takes in a commit answer as Iceberg's writers make
/// them: 19-digit ids, a 13-digit time, a manifest list named by a UUID under the
/// table's location, a summary and a log entry come to several hundred bytes, and even
/// the tests' small fixture snapshots take ~190. Contrived ones can be smaller (~110
/// bytes); misjudged, it costs only a new connection, or 256 KB read for nothing.
pub(super) const MIN_ANSWER_BYTES_PER_SNAPSHOT: usize = 160;

/// Whether the answer to a commit on `base` will be longer than floe reads on, as told
/// by the snapshots `base` retains: a chunked answer does not say its length, and reading
/// 256 KB of one that goes on for megabytes is work thrown away.
pub(super) fn answer_outgrows_read_on(base: &LoadedTable) -> bool {
    base.metadata.snapshots().len() * MIN_ANSWER_BYTES_PER_SNAPSHOT > READ_ON_AFTER_HEAD
}

impl CommitAnswer {
    pub(super) fn new(response: Response) -> Self {
        CommitAnswer {
            read: Vec::new(),
            past_head: Vec::new(),
            rest: Some(response),
            broken: None,
        }
    }

    pub(super) async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>> {
        let Some(response) = self.rest.as_mut() else {
            return Ok(None);
        };
        match response.chunk().await {
            Ok(Some(chunk)) => Ok(Some(chunk)),
            Ok(None) => {
                self.rest = None;
                Ok(None)
            }
            Err(e) => {
                self.rest = None;
                Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    transport_error(e, "commit").message().to_string(),
                ))
            }
        }
    }

    /// The checked fields, from as little of the answer as holds them; `None` when the
    /// whole answer does not hold them all. With `read_on`, what follows them may be read
    /// too (see [`CommitAnswer::read_on`]); without, the answer's table is known to be too
    /// long for it.
    pub(super) async fn head(&mut self, read_on: bool) -> Result<Option<AnswerHead>> {
        // Scanned again each time the text read doubles: linear in the answer's size even
        // when the fields come last.
        let mut next_scan = 0;
        while let Some(chunk) = self.next_chunk().await? {
            self.read.extend_from_slice(&chunk);
            if self.read.len() < next_scan {
                continue;
            }
            if let Some(head) = AnswerHead::scan_prefix(&self.read) {
                if read_on {
                    self.read_on().await;
                }
                return Ok(Some(head));
            }
            next_scan = 2 * self.read.len();
        }
        Ok(AnswerHead::scan_ended(&self.read))
    }

    /// Reads up to [`READ_ON_AFTER_HEAD`] more, so a short answer ends and its connection
    /// is kept; not when the answer says more than that is left, as its connection closes
    /// unread either way. A failure here is kept for [`CommitAnswer::whole`]: the checked
    /// fields stand, the whole answer is unknown.
    pub(super) async fn read_on(&mut self) {
        let left = self.rest.as_ref().and_then(Response::content_length);
        if left.is_some_and(|left| left > READ_ON_AFTER_HEAD as u64) {
            return;
        }
        let mut more = 0;
        while more <= READ_ON_AFTER_HEAD {
            match self.next_chunk().await {
                Ok(Some(chunk)) => {
                    more += chunk.len();
                    self.past_head.push(chunk);
                }
                Ok(None) => return,
                Err(e) => {
                    self.broken = Some(e);
                    return;
                }
            }
        }
    }

    /// The whole answer.
    pub(super) async fn whole(mut self) -> Result<Vec<u8>> {
        if let Some(e) = self.broken.take() {
            return Err(e);
        }
        for chunk in std::mem::take(&mut self.past_head) {
            self.read.extend_from_slice(&chunk);
        }
        while let Some(chunk) = self.next_chunk().await? {
            self.read.extend_from_slice(&chunk);
        }
        Ok(self.read)
    }
}

/// The table a successful commit answer carries. If it cannot be read, the outcome is
/// "unknown", so the caller reloads and finds its commit id instead of treating the
/// rows as not written.
pub(super) fn parse_commit_answer(
    ident: &TableIdent,
    answer: &[u8],
    io_props: HashMap<String, String>,
) -> Result<LoadedTable> {
    match serde_json::from_slice::<CommitTableResponse>(answer) {
        Ok(result) => Ok(LoadedTable::new(
            ident.clone(),
            Some(result.metadata_location),
            std::sync::Arc::new(result.metadata),
            io_props,
        )),
        Err(e) => Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!("commit: unexpected response: {e}"),
        )),
    }
}

/// `base` with `updates` applied, if the catalog's answer agrees with it (see
/// [`super::answer`]); `None` sends the caller to the answer's own table.
pub(super) fn applied_locally(
    base: LoadedTable,
    updates: Vec<TableUpdate>,
    head: AnswerHead,
) -> Option<LoadedTable> {
    let refs = refs_after(base.refs(), &updates);
    let LoadedTable {
        ident,
        metadata_location,
        metadata,
        io_props,
        ..
    } = base;
    let metadata = match apply_updates(metadata, metadata_location, updates) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(
                "commit to {ident}: applying it locally failed ({e}); reading the catalog's answer"
            );
            return None;
        }
    };
    if !head.agrees_with(&metadata, refs.as_ref()) {
        tracing::debug!(
            "commit to {ident}: the catalog's answer differs from the commit applied locally; reading the answer"
        );
        return None;
    }
    Some(
        LoadedTable::new(
            ident,
            head.metadata_location,
            std::sync::Arc::new(metadata),
            io_props,
        )
        .with_refs(refs),
    )
}
