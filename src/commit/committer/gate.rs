//! Room to shred: how many calls' rows wait as Arrow for a table's encoder.
//!
//! A call shreds its messages on its own thread and hands the rows in; they wait, as
//! Arrow about the size of their JSON, until the encoder takes them into a group. A host
//! with many calls in flight while a commit runs would otherwise hold every call's rows
//! twice, once as its messages and once as Arrow: at `max_in_flight` 64 that was most
//! of what floe held (in-flight bench, 2026-12-07). So a call shreds only once there is
//! room: while fewer than [`CALLS_AHEAD`] calls' rows wait, or while their JSON is under
//! [`BYTES_AHEAD`] (or `max_group_bytes`, if smaller: the encoder takes no more into one
//! group, so rows shredded beyond it wait a whole commit longer); the rest wait as JSON, which the host holds anyway, and shred while
//! the encoder writes the group before them. The room a call takes is given back when
//! the encoder takes its rows, or when they are not handed in after all.
//!
//! Never a deadlock: a call whose turn it is to hand in rows for the table (every call
//! before it has; see [`crate::commit::order`]) does not wait for room, and neither does
//! a call committing with other tables (`commit.atomic_tables`), whose commit waits for
//! theirs. So the earliest call not yet handed in always goes on, and rows waiting for
//! calls before them are only ever waiting for calls that go on. A call takes its room
//! before it claims its exactly-once positions, so a call waiting for room holds no
//! claim an earlier call could be refused on. (A host that mixes ordered and unordered
//! calls on one writer, and never ends an ordered call, stalls the unordered ones too
//! once the calls after it hold the room; floe's Go host never mixes them.)

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::sync::LockExt;

/// Calls whose rows may always wait shredded, however large: grouping many calls into
/// one commit is what group commit is for.
const CALLS_AHEAD: usize = 8;

/// JSON bytes of calls whose rows may wait shredded beyond [`CALLS_AHEAD`] calls. A
/// group is rarely larger: about 30,000 rows of 300 B, whose encoding takes several
/// times a commit's round trip, so the commits' share of the time stays small.
const BYTES_AHEAD: usize = 8 << 20;

/// What waits shredded for one table's encoder.
pub struct ShredGate {
    waiting: Mutex<Waiting>,
    freed: Notify,
    /// JSON bytes that may wait beyond [`CALLS_AHEAD`] calls.
    bytes_ahead: usize,
}

#[derive(Default, Debug, PartialEq)]
struct Waiting {
    calls: usize,
    bytes: usize,
    /// Calls waiting for room. While any does, nobody gets in on the bytes rule: small
    /// calls arriving one after another would otherwise keep a large one out for good.
    blocked: usize,
}

/// A gate whose bytes rule follows [`BYTES_AHEAD`] alone.
#[cfg(test)]
impl Default for ShredGate {
    fn default() -> Self {
        ShredGate::new(usize::MAX)
    }
}

impl ShredGate {
    /// A gate for an encoder that takes up to `max_group_bytes` of JSON into one group.
    pub fn new(max_group_bytes: usize) -> Self {
        ShredGate {
            waiting: Mutex::default(),
            freed: Notify::new(),
            bytes_ahead: max_group_bytes.min(BYTES_AHEAD),
        }
    }

    /// Whether a call of `bytes` gets in; `blocked_itself`: it is among the blocked.
    fn has_room_for(&self, waiting: &Waiting, bytes: usize, blocked_itself: bool) -> bool {
        let others_blocked = waiting.blocked > usize::from(blocked_itself);
        waiting.calls < CALLS_AHEAD
            || (!others_blocked && waiting.bytes + bytes <= self.bytes_ahead)
    }
}

/// A call counted among those waiting for room, until dropped (it got in, or gave up).
struct Blocked<'g>(&'g ShredGate);

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.0.waiting.locked().blocked -= 1;
        self.0.freed.notify_waiters();
    }
}

/// One call's room: given back when dropped.
pub struct Room {
    gate: Arc<ShredGate>,
    bytes: usize,
}

impl Drop for Room {
    fn drop(&mut self) {
        let mut waiting = self.gate.waiting.locked();
        waiting.calls -= 1;
        waiting.bytes -= self.bytes;
        drop(waiting);
        self.gate.freed.notify_waiters();
    }
}

impl ShredGate {
    /// Room for a call of `bytes` of JSON, once there is some or `may_pass` says the
    /// call may go on regardless; `passes_changed` is notified whenever its answer may
    /// have changed. Also whether the call had to wait.
    pub async fn enter(
        self: &Arc<Self>,
        bytes: usize,
        may_pass: impl Fn() -> bool,
        passes_changed: &Notify,
    ) -> (Room, bool) {
        let mut blocked: Option<Blocked> = None;
        loop {
            let freed = self.freed.notified();
            let changed = passes_changed.notified();
            tokio::pin!(freed, changed);
            freed.as_mut().enable();
            changed.as_mut().enable();
            // Asked before the gate's lock is taken: `may_pass` takes the order's, under
            // which rooms are given back (a submission dropped while handed in).
            let passes = may_pass();
            {
                let mut waiting = self.waiting.locked();
                if passes || self.has_room_for(&waiting, bytes, blocked.is_some()) {
                    waiting.calls += 1;
                    waiting.bytes += bytes;
                    drop(waiting);
                    let room = Room {
                        gate: self.clone(),
                        bytes,
                    };
                    return (room, blocked.is_some());
                }
                if blocked.is_none() {
                    waiting.blocked += 1;
                    blocked = Some(Blocked(self));
                }
            }
            tokio::select! {
                _ = freed => {}
                _ = changed => {}
            }
        }
    }

    /// Whether a call would now wait for room (however small): no call still shredding
    /// will hand in rows until the encoder takes some, so a group need not wait for more.
    pub fn is_full(&self) -> bool {
        !self.has_room_for(&self.waiting.locked(), 0, false)
    }

    /// Rooms that leave none.
    #[cfg(test)]
    pub(super) async fn fill(self: &Arc<Self>) -> Vec<Room> {
        let never = Notify::new();
        let mut rooms = Vec::new();
        while !self.is_full() {
            rooms.push(self.enter(BYTES_AHEAD, || false, &never).await.0);
        }
        rooms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn a_moment() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// `n` calls of `bytes` each, in at once (the gate must have room for them).
    async fn rooms(gate: &Arc<ShredGate>, n: usize, bytes: usize) -> Vec<Room> {
        let never = Notify::new();
        let mut rooms = Vec::new();
        for _ in 0..n {
            let (room, waited) = gate.enter(bytes, || false, &never).await;
            assert!(!waited);
            rooms.push(room);
        }
        rooms
    }

    /// A call of `bytes` entering `gate` on a task of its own.
    fn spawn_call(gate: &Arc<ShredGate>, bytes: usize) -> tokio::task::JoinHandle<(Room, bool)> {
        let gate = gate.clone();
        tokio::spawn(async move {
            let never = Notify::new();
            gate.enter(bytes, || false, &never).await
        })
    }

    /// The room `call` got (and whether it waited), once it got one.
    async fn entered(call: tokio::task::JoinHandle<(Room, bool)>, what: &str) -> (Room, bool) {
        tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect(what)
            .unwrap()
    }

    #[tokio::test]
    async fn calls_wait_once_enough_calls_and_bytes_wait() {
        let gate = Arc::new(ShredGate::default());
        // Many small calls: the bytes never fill, so none waits.
        let small = rooms(&gate, CALLS_AHEAD * 4, 10).await;
        assert!(!gate.is_full());
        drop(small);
        assert_eq!(*gate.waiting.locked(), Waiting::default(), "all given back");
        // Large calls: the first CALLS_AHEAD go in whatever their size.
        let mut rooms = rooms(&gate, CALLS_AHEAD, BYTES_AHEAD).await;
        assert!(gate.is_full());
        let waiting = spawn_call(&gate, 1);
        a_moment().await;
        assert!(!waiting.is_finished(), "went in with no room");
        rooms.pop();
        let (room, waited) = entered(waiting, "room given back wakes the waiting call").await;
        assert!(waited);
        assert_eq!(gate.waiting.locked().calls, CALLS_AHEAD);
        drop(room);
        drop(rooms);
        assert_eq!(*gate.waiting.locked(), Waiting::default());
    }

    #[tokio::test]
    async fn no_more_than_a_group_waits_beyond_the_calls() {
        let gate = Arc::new(ShredGate::new(1_000));
        let rooms = rooms(&gate, CALLS_AHEAD, 400).await;
        assert!(
            gate.is_full(),
            "8 calls of 3,200 B, over a group of 1,000 B"
        );
        drop(rooms);
        assert!(!gate.is_full());
    }

    #[tokio::test]
    async fn small_calls_do_not_get_ahead_of_a_large_one_waiting() {
        let gate = Arc::new(ShredGate::new(1_000));
        let mut rooms = rooms(&gate, CALLS_AHEAD, 10).await;
        let large = spawn_call(&gate, 2_000);
        a_moment().await;
        assert!(!large.is_finished(), "over the bytes, with 8 calls waiting");
        // The bytes would fit a small call, but a large one waits before it.
        let small = spawn_call(&gate, 10);
        a_moment().await;
        assert!(!small.is_finished(), "got ahead of the large call");
        // One room given back: both are woken, the large call first (it waited first;
        // this test's runtime runs woken tasks in order).
        rooms.pop();
        let (first, waited) = entered(large, "the large call gets the room given back").await;
        assert!(waited);
        drop((first, rooms));
        let (last, _) = entered(small, "then the small one").await;
        drop(last);
        assert_eq!(*gate.waiting.locked(), Waiting::default());
    }

    #[tokio::test]
    async fn a_call_that_may_pass_goes_in_without_room_when_told() {
        let gate = Arc::new(ShredGate::default());
        let _full = gate.fill().await;
        let turn = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let changed = Arc::new(Notify::new());
        let waiting = {
            let (gate, turn, changed) = (gate.clone(), turn.clone(), changed.clone());
            tokio::spawn(async move {
                let may_pass = || turn.load(std::sync::atomic::Ordering::SeqCst);
                gate.enter(5, may_pass, &changed).await
            })
        };
        a_moment().await;
        assert!(!waiting.is_finished());
        turn.store(true, std::sync::atomic::Ordering::SeqCst);
        changed.notify_waiters();
        let (room, _) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("its turn lets it in")
            .unwrap();
        assert_eq!(
            gate.waiting.locked().calls,
            CALLS_AHEAD + 1,
            "and it is counted"
        );
        drop(room);
    }
}
