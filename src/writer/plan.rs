//! Exactly-once glue: which of a table's messages a call writes, which it acknowledges
//! as already committed, and which wait for another call that holds their position.

use super::*;

impl Writer {
    /// [`Self::plan_exactly_once`], trusting the ledger only as far as the table bears it
    /// out: a plan that acknowledges messages without writing them (or a ledger that
    /// distrusts the table's record) is made again on the table loaded afresh, so that a
    /// rollback by another tool is seen before a re-delivered message is acknowledged,
    /// and a repaired table is seen by the retries.
    pub(super) async fn plan_checked(
        &self,
        ticket: Ticket,
        ident: &TableIdent,
        handle: &TableHandle,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<(Claim, WritePlan)> {
        let planned = self.plan_exactly_once(ticket, handle, messages, idx);
        if !planned.as_ref().map_or(true, |(_, plan)| plan.acknowledges) {
            return planned;
        }
        drop(planned); // releases the claim
        self.reload(ident, handle, "exactly-once").await;
        self.plan_exactly_once(ticket, handle, messages, idx)
    }

    /// Exactly-once: splits the group into messages to write, messages already committed
    /// (acknowledged without writing), repeats within the batch, and messages another
    /// call is still writing (refused with a retryable error), as the committer decides
    /// (see [`TableCommitter::claim_positions`]); the claim holds the positions written.
    fn plan_exactly_once(
        &self,
        ticket: Ticket,
        handle: &TableHandle,
        messages: &[Message<'_>],
        idx: &[usize],
    ) -> Result<(Claim, WritePlan)> {
        let mut plan = WritePlan::default();
        if self.options.writer_id.is_none() {
            plan.write = (0..idx.len()).collect();
            return Ok((handle.committer.new_claim(ticket), plan));
        }
        let position = |i: usize| {
            (
                messages[i].source.expect("checked on entry"),
                messages[i].offset.expect("checked on entry"),
            )
        };
        let (claim, verdicts) = handle.committer.claim_positions(
            ticket,
            idx.iter().map(|&i| {
                let (source, offset) = position(i);
                (source, offset, payload_hash(messages[i].payload))
            }),
        )?;
        for (pos, verdict) in verdicts.into_iter().enumerate() {
            let (source, offset) = position(idx[pos]);
            match verdict {
                Verdict::Write => plan.write.push(pos),
                Verdict::Committed => plan.acknowledges = true,
                Verdict::Repeat {
                    first,
                    same_payload: true,
                } => plan.duplicates.push((pos, first)),
                Verdict::Repeat { first, .. } => plan
                    .conflicting
                    .push((pos, repeated_position(idx[pos], idx[first], source, offset))),
                Verdict::InFlight {
                    same_payload,
                    holder,
                } => {
                    let e = in_flight_position(idx[pos], source, offset, same_payload);
                    match e.kind() {
                        ErrorKind::Data => plan.conflicting.push((pos, e)),
                        _ => {
                            plan.refused.push((pos, e));
                            plan.waits_for_later |= waits_for_later(ticket, holder);
                        }
                    }
                }
            }
        }
        Ok((claim, plan))
    }
}

/// How exactly-once splits one table's messages (positions within the group).
#[derive(Default)]
pub(super) struct WritePlan {
    /// The positions to write (taken out for shredding: the plan outlives the commit).
    pub(super) write: Vec<usize>,
    /// Some message is acknowledged as committed without being written.
    pub(super) acknowledges: bool,
    /// (position, position of its first copy)
    pub(super) duplicates: Vec<(usize, usize)>,
    pub(super) refused: Vec<(usize, Error)>,
    /// Some refused position is held by a call that arrived after this one: this call
    /// then gives up its place (see [`waits_for_later`]).
    pub(super) waits_for_later: bool,
    /// Positions repeated with a different payload: the source names no partition.
    pub(super) conflicting: Vec<(usize, Error)>,
}

impl WritePlan {
    /// Whether the call keeps later calls waiting at the table after this attempt: some
    /// of its messages (refused, or failed not at their fault among `failures`) are to be
    /// retried, and their retry must land before the later calls' rows — unless a
    /// refused position is held by a later call (see [`waits_for_later`]).
    pub(super) fn holds_later_calls_back(&self, failures: &[(usize, Error)]) -> bool {
        !self.waits_for_later
            && (!self.refused.is_empty()
                || failures.iter().any(|(_, e)| e.kind() != ErrorKind::Data))
    }
}

/// A cheap fingerprint of a payload, to tell a replayed message from a different one
/// that claims the same position.
fn payload_hash(payload: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}

/// Message `i`'s position is being committed by another call: a replay (the same
/// payload) is retried once that commit settles; another payload means the source names
/// no partition, the message's own fault.
fn in_flight_position(i: usize, source: &str, offset: i64, same_payload: bool) -> Error {
    if same_payload {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "message {i}: offset {offset} of source {source:?} is being committed by another call; retry"
            ),
        )
    } else {
        Error::new(
            ErrorKind::Data,
            format!(
                "message {i}: source {source:?} offset {offset} is being committed by another call with a different payload: \
                 exactly_once.source must identify the message's partition (e.g. topic and partition)"
            ),
        )
    }
}

/// Whether a call (`ticket`) refused a position held by the call `holder` would wait
/// on a call that waits on it, were it to keep its place in arrival order: a call waits
/// only for those that arrived before it, so keeping its place for a position an earlier
/// (or unordered) call is committing is safe, and for one a later call holds would
/// deadlock. Then the call gives up its place, and the order between the two is the
/// order their commits land in (a redelivery a later call took first).
fn waits_for_later(ticket: Ticket, holder: Ticket) -> bool {
    ticket != UNORDERED && holder != UNORDERED && holder > ticket
}

fn repeated_position(i: usize, first: usize, source: &str, offset: i64) -> Error {
    Error::new(
        ErrorKind::Data,
        format!(
            "message {i}: source {source:?} offset {offset} repeats message {first} with a different payload: \
             exactly_once.source must identify the message's partition (e.g. topic and partition)"
        ),
    )
}
