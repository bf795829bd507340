//! Exactly-once claims: offsets committed under the writer id, and those claimed by
//! calls still in flight, so a replayed message is never written twice.

use crate::sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::commit::offsets::SourceOffsets;
use crate::commit::order::Ticket;
use crate::error::{Error, Result};

/// Exactly-once state: offsets committed under the writer id, and offsets claimed by
/// submissions still on their way (so a replayed message is not written twice while
/// its first copy is in flight).
#[derive(Default)]
pub struct Ledger {
    pub committed: SourceOffsets,
    /// Claim id → the claiming call's ticket and its positions.
    pub(super) in_flight: HashMap<u64, (Ticket, Claimed)>,
    /// Why the table's record cannot be trusted any more (main rolled back behind the
    /// commit that wrote it): `committed` then overstates what the table holds, so no
    /// position is decided until a record that can be trusted is seen again.
    pub(super) distrusted: Option<Error>,
}

/// Claimed positions of one call: source → offset → hash of the message's payload.
pub type Claimed = HashMap<String, HashMap<i64, u64>>;

impl Ledger {
    /// The ticket of the call committing this position, and its message's payload hash.
    pub fn in_flight(&self, source: &str, offset: i64) -> Option<(Ticket, u64)> {
        self.in_flight
            .values()
            .find_map(|(ticket, c)| Some((*ticket, *c.get(source)?.get(&offset)?)))
    }

    /// Every offset claimed by a call in flight.
    pub fn claimed_offsets(&self) -> SourceOffsets {
        let mut all = SourceOffsets::default();
        for (source, offsets) in self.in_flight.values().flat_map(|(_, c)| c) {
            offsets
                .keys()
                .for_each(|&offset| all.insert(source, offset));
        }
        all
    }

    pub fn claim(&mut self, claim: u64, ticket: Ticket, claimed: Claimed) {
        self.in_flight.insert(claim, (ticket, claimed));
    }

    pub fn release(&mut self, claim: u64) {
        self.in_flight.remove(&claim);
    }

    /// Takes in the table's record as read from its metadata: its offsets join
    /// `committed`; a record that cannot be trusted (see `committed_offsets`) stops
    /// every decision until one that can is read.
    pub fn take_in(&mut self, record: Result<SourceOffsets>) {
        match record {
            // A record trusted again after a distrusted one may hold less than the
            // ledger learnt before (a repaired table): it replaces what the ledger knew.
            Ok(committed) if self.distrusted.take().is_some() => self.committed = committed,
            Ok(committed) => self.committed.union_with(&committed),
            Err(e) => {
                if self.distrusted.is_none() {
                    tracing::warn!(
                        "exactly-once positions are refused until the table is fixed: {e}"
                    );
                }
                self.distrusted = Some(e);
            }
        }
    }
}

/// A call's exactly-once claim in the ledger, released when dropped: however the call
/// ends — an error, a panic, a cancelled future, a committer task that dies — its
/// positions do not stay "in flight" for ever.
pub struct Claim {
    pub(super) id: u64,
    /// The call's place in arrival order, told to calls its positions hold back.
    pub(super) ticket: Ticket,
    pub(super) ledger: Arc<Mutex<Ledger>>,
}

impl Claim {
    /// Records the positions this call is about to write (under the ledger's lock, which
    /// the caller holds while it checks them).
    pub fn hold(&self, ledger: &mut Ledger, claimed: Claimed) {
        ledger.claim(self.id, self.ticket, claimed);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.ledger.locked().release(self.id);
    }
}

/// What exactly-once decides for one message of a call, by its position (source and
/// offset) and a hash of its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Neither committed nor claimed: the call writes it, and now holds its claim.
    Write,
    /// Committed under the writer id already: acknowledged without being written.
    Committed,
    /// Its position came earlier in this call (at index `first` of the positions), with
    /// the same payload or another.
    Repeat { first: usize, same_payload: bool },
    /// Another call in flight (arrived with ticket `holder`) claims its position, with
    /// the same payload or another.
    InFlight { same_payload: bool, holder: Ticket },
}

/// Decides each position of a call against the ledger and claims those it writes
/// under `claim`, all under one lock, so two calls never both write a position. Fails
/// while the table's record is distrusted (see [`Ledger::take_in`]): a position it
/// lists may not be in the table, and one it lacks may be.
pub(super) fn claim_positions<'a>(
    ledger: &Mutex<Ledger>,
    claim: &Claim,
    positions: impl IntoIterator<Item = (&'a str, i64, u64)>,
) -> Result<Vec<Verdict>> {
    let mut claimed = Claimed::new();
    let mut first_of: HashMap<(&str, i64), (usize, u64)> = HashMap::new();
    let mut ledger = ledger.locked();
    crate::failpoint::hit(crate::failpoint::names::PLAN_LEDGER_LOCKED);
    if let Some(e) = &ledger.distrusted {
        return Err(e.clone());
    }
    let verdicts = positions
        .into_iter()
        .enumerate()
        .map(|(n, (source, offset, hash))| {
            if ledger.committed.contains(source, offset) {
                Verdict::Committed
            } else if let Some(&(first, first_hash)) = first_of.get(&(source, offset)) {
                Verdict::Repeat {
                    first,
                    same_payload: first_hash == hash,
                }
            } else if let Some((holder, other)) = ledger.in_flight(source, offset) {
                Verdict::InFlight {
                    same_payload: other == hash,
                    holder,
                }
            } else {
                first_of.insert((source, offset), (n, hash));
                claimed
                    .entry(source.to_string())
                    .or_default()
                    .insert(offset, hash);
                Verdict::Write
            }
        })
        .collect();
    claim.hold(&mut ledger, claimed);
    Ok(verdicts)
}
