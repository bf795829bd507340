//! The order in which calls' rows reach a table: the order the calls arrived in.
//!
//! Upserts and deletes by key are only right if each key's operations apply in the order
//! the host handed them over. A call arrives ([`Order::arrive`]) before it writes and
//! keeps its place through every retry until it departs ([`Order::depart`]). Calls shred
//! in parallel, but a call hands its rows to a table's committer only once every call that
//! arrived before it has handed in its own rows for that table, in the attempt that
//! stands ([`Order::admit`]); the committer keeps that order (a group resolves its calls
//! in queue order, groups commit in order).
//!
//! When rows the committer was given do not commit (a group failed: a refused commit, a
//! schema changed under the rows, storage refused the files), the rows handed in after
//! them must not commit either, or a retry of the earlier ones would land after the later
//! ones and an older operation on a key would win. The committer then moves the table's
//! epoch on ([`Order::overtake`]): rows handed in under an older epoch fail as held back
//! (the calls retry them), and a call standing under an older epoch holds back the calls
//! after it until it hands its rows in again.
//!
//! A call arrives with ticket 0 when the host asked for no order (appends, calls from
//! hosts that do not ask): it waits for nobody and nobody waits for it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use iceberg::TableIdent;
use tokio::sync::Notify;

use crate::sync::LockExt;

/// A call's place in arrival order; [`UNORDERED`] for a call that keeps none.
pub type Ticket = u64;

/// The ticket of a call that keeps no order.
pub const UNORDERED: Ticket = 0;

/// Where an ordered call stands with a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// It has rows for the table not yet handed in: later calls wait.
    Unsent,
    /// All its rows for the table were handed in under this epoch.
    Handed(u64),
}

#[derive(Default)]
struct State {
    last_ticket: Ticket,
    /// Live ordered calls: `None` until their first attempt names its tables (until then
    /// they hold back every table).
    calls: BTreeMap<Ticket, Option<HashMap<TableIdent, Standing>>>,
    epochs: HashMap<TableIdent, u64>,
}

impl State {
    fn epoch(&self, table: &TableIdent) -> u64 {
        self.epochs.get(table).copied().unwrap_or(0)
    }

    /// Whether every call before `ticket` has handed in its rows for `table` under the
    /// current epoch (or has none for it).
    fn is_turn(&self, ticket: Ticket, table: &TableIdent) -> bool {
        let epoch = self.epoch(table);
        self.calls.range(..ticket).all(|(_, tables)| match tables {
            None => false,
            Some(tables) => match tables.get(table) {
                None => true,
                Some(Standing::Handed(e)) => *e == epoch,
                Some(Standing::Unsent) => false,
            },
        })
    }

    fn stand(&mut self, ticket: Ticket, table: &TableIdent, standing: Option<Standing>) {
        let Some(entry) = self.calls.get_mut(&ticket) else {
            return; // departed (cancelled) meanwhile
        };
        let tables = entry.get_or_insert_with(HashMap::new);
        match standing {
            Some(s) => tables.insert(table.clone(), s),
            None => tables.remove(table),
        };
    }
}

/// The arrival order of one writer's calls, per table (see the module docs).
#[derive(Default)]
pub struct Order {
    state: Mutex<State>,
    /// Woken whenever a call's standing or an epoch changes.
    changed: Notify,
}

impl Order {
    /// A new call's ticket: after every call that arrived before.
    pub fn arrive(&self) -> Ticket {
        let mut state = self.state.locked();
        state.last_ticket += 1;
        let ticket = state.last_ticket;
        state.calls.insert(ticket, None);
        ticket
    }

    /// The call is over (written, failed for good, or given up): it holds nobody back.
    pub fn depart(&self, ticket: Ticket) {
        if ticket == UNORDERED {
            return;
        }
        self.state.locked().calls.remove(&ticket);
        self.changed.notify_waiters();
    }

    /// The call starts an attempt on these tables: until it hands in its rows for each,
    /// the calls after it wait. A call that did not arrive (or departed) is unordered.
    pub fn attempt<'a>(&self, ticket: Ticket, tables: impl IntoIterator<Item = &'a TableIdent>) {
        if ticket == UNORDERED {
            return;
        }
        let mut state = self.state.locked();
        if !state.calls.contains_key(&ticket) {
            return;
        }
        for table in tables {
            state.stand(ticket, table, Some(Standing::Unsent));
        }
        // A call naming its tables no longer holds back the others.
        state
            .calls
            .entry(ticket)
            .or_default()
            .get_or_insert_with(HashMap::new);
        drop(state);
        self.changed.notify_waiters();
    }

    /// Waits for the call's turn at `table`, then hands its rows in with `send` (given the
    /// epoch they go under) while no other call can. `complete`: these are all the rows
    /// the call has for the table in this attempt; otherwise (some were held back to be
    /// retried) the calls after it keep waiting.
    pub async fn admit<R>(
        &self,
        ticket: Ticket,
        table: &TableIdent,
        complete: bool,
        send: impl FnOnce(u64) -> R,
    ) -> R {
        let mut send = Some(send);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state.locked();
                let ordered = ticket != UNORDERED && state.calls.contains_key(&ticket);
                if !ordered || state.is_turn(ticket, table) {
                    let epoch = state.epoch(table);
                    let out = (send.take().expect("sent once"))(epoch);
                    if ordered {
                        let standing = match complete {
                            true => Standing::Handed(epoch),
                            false => Standing::Unsent,
                        };
                        state.stand(ticket, table, Some(standing));
                        drop(state);
                        self.changed.notify_waiters();
                    }
                    return out;
                }
            }
            notified.await;
        }
    }

    /// Whether an ordered call could hand its rows for `table` in now (see
    /// [`Self::admit`]): every call before it has. `false` for [`UNORDERED`] calls,
    /// which never wait for others.
    pub fn may_hand_in(&self, ticket: Ticket, table: &TableIdent) -> bool {
        if ticket == UNORDERED {
            return false;
        }
        let state = self.state.locked();
        !state.calls.contains_key(&ticket) || state.is_turn(ticket, table)
    }

    /// Notified whenever [`Self::may_hand_in`] may have changed its answer.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    /// The call's attempt at `table` ended and left nothing to retry there.
    pub fn settle(&self, ticket: Ticket, table: &TableIdent) {
        if ticket == UNORDERED {
            return;
        }
        self.state.locked().stand(ticket, table, None);
        self.changed.notify_waiters();
    }

    /// The call's attempt at `table` ended with rows to retry: the calls after it wait
    /// until it hands them in.
    pub fn unsettle(&self, ticket: Ticket, table: &TableIdent) {
        if ticket == UNORDERED {
            return;
        }
        self.state
            .locked()
            .stand(ticket, table, Some(Standing::Unsent));
    }

    /// Rows handed in to `table` so far did not all commit: moves its epoch on, so rows
    /// handed in before now fail as held back (see [`Self::overtaken`]).
    pub fn overtake(&self, table: &TableIdent) {
        *self.state.locked().epochs.entry(table.clone()).or_insert(0) += 1;
        self.changed.notify_waiters();
    }

    /// Whether rows handed in under `epoch` (by an ordered call) must not commit: rows
    /// handed in before them failed since.
    pub fn overtaken(&self, table: &TableIdent, epoch: Option<u64>) -> bool {
        epoch.is_some_and(|e| e < self.state.locked().epoch(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn table(name: &str) -> TableIdent {
        TableIdent::from_strs(["ns", name]).unwrap()
    }

    /// Admits `ticket` at `t` in the background, recording the order of admissions.
    fn admit_later(
        order: &Arc<Order>,
        log: &Arc<Mutex<Vec<Ticket>>>,
        ticket: Ticket,
        t: TableIdent,
    ) -> tokio::task::JoinHandle<u64> {
        let (order, log) = (order.clone(), log.clone());
        tokio::spawn(async move {
            order
                .admit(ticket, &t, true, |epoch| {
                    log.locked().push(ticket);
                    epoch
                })
                .await
        })
    }

    async fn settle_a_moment() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_later_call_waits_until_every_earlier_one_handed_its_rows_in() {
        let order = Arc::new(Order::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (order.arrive(), order.arrive());
        order.attempt(a, [&table("t")]);
        order.attempt(b, [&table("t")]);
        let later = admit_later(&order, &log, b, table("t"));
        settle_a_moment().await;
        assert!(log.locked().is_empty(), "b went before a");
        admit_later(&order, &log, a, table("t")).await.unwrap();
        later.await.unwrap();
        assert_eq!(*log.locked(), vec![a, b]);
    }

    #[tokio::test]
    async fn calls_on_other_tables_and_unordered_calls_do_not_wait() {
        let order = Arc::new(Order::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (order.arrive(), order.arrive());
        order.attempt(a, [&table("t")]);
        order.attempt(b, [&table("u")]);
        admit_later(&order, &log, b, table("u")).await.unwrap();
        admit_later(&order, &log, UNORDERED, table("t"))
            .await
            .unwrap();
        assert_eq!(*log.locked(), vec![b, UNORDERED]);
    }

    #[tokio::test]
    async fn a_call_not_yet_attempting_holds_back_every_table() {
        let order = Arc::new(Order::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let (a, b) = (order.arrive(), order.arrive());
        order.attempt(b, [&table("u")]);
        let later = admit_later(&order, &log, b, table("u"));
        settle_a_moment().await;
        assert!(log.locked().is_empty());
        order.attempt(a, [&table("t")]);
        later.await.unwrap();
        assert_eq!(*log.locked(), vec![b]);
    }

    #[tokio::test]
    async fn after_a_failure_rows_handed_in_before_are_overtaken_and_their_calls_go_first() {
        let order = Arc::new(Order::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let t = table("t");
        let (a, b) = (order.arrive(), order.arrive());
        order.attempt(a, [&t]);
        order.attempt(b, [&t]);
        let ea = admit_later(&order, &log, a, t.clone()).await.unwrap();
        let eb = admit_later(&order, &log, b, t.clone()).await.unwrap();
        order.overtake(&t); // a's group failed
        assert!(order.overtaken(&t, Some(ea)) && order.overtaken(&t, Some(eb)));
        assert!(
            !order.overtaken(&t, None),
            "unordered rows are never held back"
        );
        // b retries first, but waits for a to hand its rows in again.
        let b_again = admit_later(&order, &log, b, t.clone());
        settle_a_moment().await;
        assert_eq!(log.locked().len(), 2);
        let ea2 = admit_later(&order, &log, a, t.clone()).await.unwrap();
        assert_eq!(b_again.await.unwrap(), ea2);
        assert!(!order.overtaken(&t, Some(ea2)));
        assert_eq!(*log.locked(), vec![a, b, a, b]);
    }

    #[tokio::test]
    async fn an_incomplete_or_unsettled_call_holds_back_later_ones_until_it_departs() {
        let order = Arc::new(Order::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        let t = table("t");
        let (a, b) = (order.arrive(), order.arrive());
        order.attempt(a, [&t]);
        order.attempt(b, [&t]);
        order.admit(a, &t, false, |_| ()).await;
        let later = admit_later(&order, &log, b, t.clone());
        settle_a_moment().await;
        assert!(log.locked().is_empty(), "a still has rows to hand in");
        order.settle(a, &t);
        later.await.unwrap();
        let c = order.arrive();
        order.attempt(c, [&t]);
        order.unsettle(b, &t);
        let last = admit_later(&order, &log, c, t.clone());
        settle_a_moment().await;
        assert_eq!(*log.locked(), vec![b]);
        order.depart(b);
        last.await.unwrap();
        assert_eq!(*log.locked(), vec![b, c]);
    }
}
