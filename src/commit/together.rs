//! Atomic multi-table commits (`commit.atomic_tables`): the tables one call routes to
//! commit in one catalog transaction ([`Catalog::commit_tables`]), so readers see all of
//! the call's tables change or none.
//!
//! Each table's commit stage builds its part as for any commit (its snapshot, manifests,
//! exactly-once record) and, instead of sending it, hands it to its [`Party`] and waits.
//! When the last table's part is in, the parts go to the catalog together (a round) and
//! every party gets the whole's answer: landed (each loads its table to take it in), a
//! conflict on any table (each reloads and rebuilds its part, as after a conflict of its
//! own, and hands it in again: the next round), or an unknown outcome (each looks for its
//! own commit id; the catalog applied all parts or none, so they find the same).
//!
//! A table whose part will never come (its rows could not be shredded or written, its
//! stage gave up) calls the transaction off when its party is dropped: every part waiting
//! or yet to come fails, nothing of the call commits, and the call retries. A table with
//! nothing to commit (its messages failed through their own fault, or exactly-once found
//! them committed) withdraws: the others commit without it.
//!
//! No deadlock: calls that commit together are ordered (see [`crate::commit::order`]), so
//! every table meets the transactions in the order their calls arrived, and the earliest
//! one waiting waits for no later one. A stage waiting here holds none of the writer's
//! commit slots, which the parts still to come need.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iceberg::{TableIdent, TableRequirement, TableUpdate};
use tokio::sync::oneshot;

use crate::catalog::{Catalog, LoadedTable, TableChanges};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockExt;

/// The parties of one call's transaction, one per table, made before any table works.
pub fn parties(catalog: Arc<dyn Catalog>, tables: &[TableIdent]) -> Vec<Party> {
    let shared = Arc::new(Shared {
        catalog,
        state: Mutex::new(State {
            expected: tables.len(),
            ..State::default()
        }),
    });
    tables
        .iter()
        .map(|ident| Party {
            shared: shared.clone(),
            ident: ident.clone(),
            settled: false,
        })
        .collect()
}

/// One table's place in its call's transaction. Dropped before its part landed (and
/// without withdrawing), it calls the transaction off.
pub struct Party {
    shared: Arc<Shared>,
    ident: TableIdent,
    /// It withdrew or its part landed: dropping it calls nothing off.
    settled: bool,
}

struct Shared {
    catalog: Arc<dyn Catalog>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Parts a round needs: the parties that have not withdrawn.
    expected: usize,
    /// The parts handed in for the round under way.
    parts: Vec<Part>,
    /// Why the transaction was called off: every part now fails with it.
    called_off: Option<Error>,
    /// A table's part was found landed: parts waiting or to come are told to look for
    /// theirs (see [`Party::landed`]).
    landed: bool,
}

struct Part {
    base: LoadedTable,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
    reply: oneshot::Sender<Answer>,
}

/// What a part is told: when its round went to the catalog (`None`: it never did) and
/// the answer for the whole.
type Answer = (Option<Instant>, Result<Option<LoadedTable>>);

/// A part's outcome (see [`Party::commit`]).
pub struct Outcome {
    /// This table as it now is, or why not.
    pub result: Result<LoadedTable>,
    /// How long the part waited for the other tables' parts before its round was sent.
    pub waited: Duration,
}

impl Party {
    pub fn ident(&self) -> &TableIdent {
        &self.ident
    }

    /// Commits this table's part with the others': waits for them, and answers for the
    /// whole (see the module docs). `Ok` holds this table as it now is; a transaction
    /// called off fails with [`ErrorKind::Cancelled`] (not to be retried: the call is).
    pub async fn commit(
        &self,
        base: LoadedTable,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Outcome {
        let handed_in = Instant::now();
        let (sent, answer) = self.round(base, requirements, updates).await;
        let waited = sent.map_or_else(|| handed_in.elapsed(), |at| at - handed_in);
        let result = match answer {
            Ok(Some(table)) => Ok(table),
            Ok(None) => self.load_landed().await,
            Err(e) => Err(e),
        };
        Outcome { result, waited }
    }

    /// Why a part handed in now could not commit, when that is already known: the
    /// transaction was called off, or another table found it landed. An attempt asks
    /// before it builds and uploads a part that would only be refused.
    pub fn over(&self) -> Option<Error> {
        self.shared.state.locked().over()
    }

    /// Hands the part in and waits for its round's answer.
    async fn round(
        &self,
        base: LoadedTable,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Answer {
        let (reply, answer) = oneshot::channel();
        let round = {
            let mut state = self.shared.state.locked();
            if let Some(e) = state.over() {
                return (None, Err(e));
            }
            state.parts.push(Part {
                base,
                requirements,
                updates,
                reply,
            });
            state.full_round()
        };
        if let Some(parts) = round {
            // On its own task: a round once sent is answered, whatever becomes of this one.
            let shared = self.shared.clone();
            tokio::spawn(async move { shared.send(parts).await });
        }
        answer.await.unwrap_or_else(|_| {
            let lost = Error::new(
                ErrorKind::CommitStateUnknown,
                "the answer to the transaction across tables was lost",
            );
            (None, Err(lost))
        })
    }

    /// This table's part landed (here, or found landed by a look after an unknown
    /// outcome): dropping the party calls nothing off. A part another table hands in
    /// now (its look, after the same unknown outcome, came before the transaction
    /// applied, or read a stale table) would wait for this one for ever: it is told
    /// instead that the outcome is unknown, and looks again.
    pub fn landed(&mut self) {
        self.settled = true;
        self.shared.end(|state| state.landed = true);
    }

    /// This table has nothing to commit: the others commit without it.
    pub fn withdraw(mut self) {
        self.settled = true;
        let round = {
            let mut state = self.shared.state.locked();
            state.expected -= 1;
            state.full_round()
        };
        if let Some(parts) = round {
            let shared = self.shared.clone();
            tokio::spawn(async move { shared.send(parts).await });
        }
    }

    /// The table after a transaction that landed (its catalog answered without it).
    /// A table that cannot be loaded leaves the outcome to the stage's look.
    async fn load_landed(&self) -> Result<LoadedTable> {
        match self.shared.catalog.load_table(&self.ident).await {
            Ok(Some(table)) => Ok(table),
            Ok(None) => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                format!("table {} was gone after its transaction landed", self.ident),
            )),
            Err(e) => Err(Error::new(
                ErrorKind::CommitStateUnknown,
                format!(
                    "the transaction landed, but loading {} to take it in failed: {e}",
                    self.ident
                ),
            )),
        }
    }
}

impl Drop for Party {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let e = Error::new(
            ErrorKind::Cancelled,
            format!(
                "table {} of the batch could not commit, and the tables of a batch commit \
                 together (commit.atomic_tables): none of them did",
                self.ident
            ),
        );
        self.shared.end(|state| {
            state.called_off.get_or_insert(e);
        });
    }
}

/// What a part handed in after another table's part landed is told.
fn found_landed_elsewhere() -> Error {
    Error::new(
        ErrorKind::CommitStateUnknown,
        "another table of the batch found the batch's transaction landed; this table's \
         part is looked for again",
    )
}

impl State {
    /// Why no part can commit any more, once that is known.
    fn over(&self) -> Option<Error> {
        match &self.called_off {
            Some(e) => Some(e.clone()),
            None => self.landed.then(found_landed_elsewhere),
        }
    }

    /// The round's parts once every expected part is in.
    fn full_round(&mut self) -> Option<Vec<Part>> {
        (self.expected > 0 && self.parts.len() >= self.expected)
            .then(|| std::mem::take(&mut self.parts))
    }
}

impl Shared {
    /// Settles the transaction (`how`: called off, or landed) and answers the parts
    /// waiting for a round that will not come with why.
    fn end(&self, how: impl FnOnce(&mut State)) {
        let (waiting, why) = {
            let mut state = self.state.locked();
            how(&mut state);
            (std::mem::take(&mut state.parts), state.over())
        };
        let why = why.expect("an ended transaction says why");
        for part in waiting {
            let _ = part.reply.send((None, Err(why.clone())));
        }
    }

    /// Sends one round and answers each part. A round of one table is an ordinary
    /// commit (which answers with the table).
    async fn send(&self, mut parts: Vec<Part>) {
        let sent = Some(Instant::now());
        if parts.len() == 1 {
            let part = parts.pop().expect("one part");
            let answer = self
                .catalog
                .commit_on(part.base, part.requirements, part.updates)
                .await
                .map(Some);
            let _ = part.reply.send((sent, answer));
            return;
        }
        let (changes, replies): (Vec<TableChanges>, Vec<_>) = parts
            .into_iter()
            .map(|p| {
                let change = TableChanges {
                    ident: p.base.ident.clone(),
                    requirements: p.requirements,
                    updates: p.updates,
                };
                (change, p.reply)
            })
            .unzip();
        let answer = self.catalog.commit_tables(changes).await.map(|()| None);
        for reply in replies {
            let _ = reply.send((sent, answer.clone()));
        }
    }
}

#[cfg(test)]
mod tests;
