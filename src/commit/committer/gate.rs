//! Room to shred: how many calls' rows wait as Arrow for a table's encoder.
//!
//! A call shreds its messages on its own thread and hands the rows in; they wait, as
//! Arrow about the size of their JSON, until the encoder takes them into a group. A host
//! with many calls in flight while a commit runs would otherwise hold every call's rows
//! twice, once as its messages and once as Arrow: at `max_in_flight` 64 that was most
//! of what floe held (in-flight bench, 2026-12-07). So a call shreds only once there is
//! room: while fewer than [`CALLS_AHEAD`] calls' rows wait, or, while no other call waits
//! for room, while their JSON is under [`BYTES_AHEAD`] (or `max_group_bytes`, if smaller:
//! the encoder takes no more into one group, so rows shredded beyond it wait a whole
//! commit longer); the rest wait as JSON, which the host holds anyway, and shred while
//! the encoder writes the group before them. The room a call takes is given back when
//! the encoder takes its rows, or when they are not handed in after all.
//!
//! Calls waiting for room get it in arrival order: ordered calls by their tickets (the
//! earlier can hand their rows in sooner, and a later call never claims an exactly-once
//! position ahead of an earlier one waiting here), unordered ones after them, first come,
//! first in. A call that arrives at the gate never takes room a waiting call before it
//! is owed. (One committing with other tables still may: that is the limit
//! `docs/upserts.md` states for redeliveries.)
//!
//! Never a deadlock: a call whose turn it is to hand in rows for the table (every call
//! before it has; see [`crate::commit::order`]) waits for room only while the rooms held
//! by calls yet to hand in (which may be waiting for this one) would leave it some: the
//! rest hold rows already handed in, which the encoder takes whatever calls do. If those
//! not handed in fill the gate alone, it goes in. A call committing with other tables
//! (`commit.atomic_tables`), whose commit waits for theirs, never waits. So the earliest call not yet handed in always goes on, and
//! rows waiting for calls before them are only ever waiting for calls that go on. A call
//! takes its room before it claims its exactly-once positions, so a call waiting for
//! room holds no claim an earlier call could be refused on. (A host that mixes ordered
//! and unordered calls on one writer, and never ends an ordered call, stalls the
//! unordered ones too once the calls after it hold the room; floe's Go host never mixes
//! them.)

use std::collections::BTreeSet;
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
    /// Notified when a call begins to wait in line (the gate may have become full).
    joined: Notify,
    /// JSON bytes that may wait beyond [`CALLS_AHEAD`] calls.
    bytes_ahead: usize,
}

#[derive(Default, Debug)]
struct Waiting {
    calls: usize,
    bytes: usize,
    /// Of `calls` and `bytes`, those whose rows are handed in: the encoder takes them
    /// whatever any call does.
    handed_in: usize,
    handed_in_bytes: usize,
    /// Calls waiting for room, by their priority and then by when they began to wait:
    /// the first goes in first.
    line: BTreeSet<Place>,
    /// The place in line of the next call to wait.
    next_place: u64,
}

/// A place in line: the call's priority (lower first: the ticket of an ordered call, so
/// earlier calls, which can hand their rows in sooner, shred first; unordered calls
/// last), then when it began to wait.
type Place = (u64, u64);

/// What lets a call in besides room of its own (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Waits in line for room.
    InLine,
    /// Its turn to hand in rows: ahead of the line, and past the limits while the calls
    /// yet to hand in fill them alone (they may be waiting for it).
    Turn,
    /// Commits with other tables: goes in at once.
    Together,
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
            joined: Notify::new(),
            bytes_ahead: max_group_bytes.min(BYTES_AHEAD),
        }
    }

    /// Whether there is room for a call of `bytes` (`place`: its own in line, if any).
    /// While other calls wait in line, only [`CALLS_AHEAD`] counts: rows then wait
    /// shredded for a few calls, not for however many fit in the bytes.
    fn has_room_for(&self, waiting: &Waiting, bytes: usize, place: Option<Place>) -> bool {
        let others_in_line = waiting.line.len() - usize::from(place.is_some());
        match others_in_line {
            0 => self.fits(waiting.calls, waiting.bytes, bytes),
            _ => waiting.calls < CALLS_AHEAD,
        }
    }

    /// Whether a call of `bytes` fits beside `calls` of `waiting_bytes`.
    fn fits(&self, calls: usize, waiting_bytes: usize, bytes: usize) -> bool {
        calls < CALLS_AHEAD || waiting_bytes + bytes <= self.bytes_ahead
    }

    /// Whether a call of `bytes` standing so gets in; `place`: its place in line, if it
    /// waits there.
    fn lets_in(
        &self,
        waiting: &Waiting,
        bytes: usize,
        standing: Standing,
        place: Option<Place>,
    ) -> bool {
        match standing {
            Standing::Together => true,
            // Rooms handed in come back whatever calls do; rooms not handed in may wait
            // for this call: it waits only if those alone would leave it room.
            // (Ahead of the line, by the calls and the bytes alone: the same rule with
            // and without the rooms handed in, so a call that waits is sure to get in
            // once those come back.)
            Standing::Turn => {
                self.fits(waiting.calls, waiting.bytes, bytes)
                    || !self.fits(
                        waiting.calls - waiting.handed_in,
                        waiting.bytes - waiting.handed_in_bytes,
                        bytes,
                    )
            }
            Standing::InLine => {
                let first = waiting.line.first().is_none_or(|&f| Some(f) == place);
                first && self.has_room_for(waiting, bytes, place)
            }
        }
    }
}

/// A call's place among those waiting for room, until dropped (it got in, or gave up).
struct InLine<'g> {
    gate: &'g ShredGate,
    place: Place,
}

impl<'g> InLine<'g> {
    fn join(gate: &'g ShredGate, waiting: &mut Waiting, priority: u64) -> Self {
        let place = (priority, waiting.next_place);
        waiting.next_place += 1;
        waiting.line.insert(place);
        gate.joined.notify_waiters();
        InLine { gate, place }
    }
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.gate.waiting.locked().line.remove(&self.place);
        // The next in line may now go in.
        self.gate.freed.notify_waiters();
    }
}

/// One call's room: given back when dropped.
pub struct Room {
    gate: Arc<ShredGate>,
    bytes: usize,
    handed_in: bool,
}

impl Room {
    /// The call's rows are handed to the encoder (which takes them whatever any call
    /// does): a call in its turn no longer needs to go in for them.
    pub fn hand_in(&mut self) {
        if !std::mem::replace(&mut self.handed_in, true) {
            let mut waiting = self.gate.waiting.locked();
            waiting.handed_in += 1;
            waiting.handed_in_bytes += self.bytes;
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        let mut waiting = self.gate.waiting.locked();
        waiting.calls -= 1;
        waiting.bytes -= self.bytes;
        if self.handed_in {
            waiting.handed_in -= 1;
            waiting.handed_in_bytes -= self.bytes;
        }
        drop(waiting);
        self.gate.freed.notify_waiters();
    }
}

impl ShredGate {
    /// Room for a call of `bytes` of JSON, once it may go in as it stands (`standing`,
    /// asked again whenever `standing_changed` is notified); in line, calls of a lower
    /// `priority` go first. Also whether the call had to wait.
    pub async fn enter(
        self: &Arc<Self>,
        (bytes, priority): (usize, u64),
        standing: impl Fn() -> Standing,
        standing_changed: &Notify,
    ) -> (Room, bool) {
        let mut in_line: Option<InLine> = None;
        loop {
            let freed = self.freed.notified();
            let changed = standing_changed.notified();
            tokio::pin!(freed, changed);
            freed.as_mut().enable();
            changed.as_mut().enable();
            // Asked before the gate's lock is taken: `standing` takes the order's, under
            // which rooms are given back (a submission dropped while handed in).
            let standing = standing();
            {
                let mut waiting = self.waiting.locked();
                let place = in_line.as_ref().map(|l| l.place);
                if self.lets_in(&waiting, bytes, standing, place) {
                    waiting.calls += 1;
                    waiting.bytes += bytes;
                    let others_wait = waiting.line.len() > usize::from(place.is_some());
                    drop(waiting);
                    if others_wait {
                        // A room not handed in may let a call in its turn go in.
                        self.freed.notify_waiters();
                    }
                    let room = Room {
                        gate: self.clone(),
                        bytes,
                        handed_in: false,
                    };
                    return (room, in_line.is_some());
                }
                if in_line.is_none() {
                    in_line = Some(InLine::join(self, &mut waiting, priority));
                    // It may have joined ahead of everyone in line: asked again at once.
                    continue;
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
        !self.has_room_for(&self.waiting.locked(), 0, None)
    }

    /// Resolves when a call begins to wait in line: a group gathering for more calls
    /// asks [`Self::is_full`] again.
    pub fn call_joins_line(&self) -> tokio::sync::futures::Notified<'_> {
        self.joined.notified()
    }

    /// Rooms that leave none.
    #[cfg(test)]
    pub(super) async fn fill(self: &Arc<Self>) -> Vec<Room> {
        let mut rooms = Vec::new();
        while !self.is_full() {
            rooms.extend(self.rooms(1, BYTES_AHEAD).await);
        }
        rooms
    }

    /// `n` calls of `bytes` each, in at once (the gate must have room for them).
    #[cfg(test)]
    pub(super) async fn rooms(self: &Arc<Self>, n: usize, bytes: usize) -> Vec<Room> {
        let never = Notify::new();
        let mut rooms = Vec::new();
        for _ in 0..n {
            let (room, waited) = self.enter((bytes, 0), || Standing::InLine, &never).await;
            assert!(!waited, "the gate had no room");
            rooms.push(room);
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

    /// A call of `bytes` and `priority` entering `gate` as `standing`, on a task of its
    /// own.
    fn spawn_entering(
        gate: &Arc<ShredGate>,
        (bytes, priority): (usize, u64),
        standing: Standing,
    ) -> tokio::task::JoinHandle<(Room, bool)> {
        let gate = gate.clone();
        tokio::spawn(async move {
            let never = Notify::new();
            gate.enter((bytes, priority), || standing, &never).await
        })
    }

    /// An unordered call of `bytes` waiting in line, on a task of its own.
    fn spawn_call(gate: &Arc<ShredGate>, bytes: usize) -> tokio::task::JoinHandle<(Room, bool)> {
        spawn_entering(gate, (bytes, 0), Standing::InLine)
    }

    /// No room taken and no call in line.
    fn all_given_back(gate: &ShredGate) {
        let waiting = gate.waiting.locked();
        assert_eq!((waiting.calls, waiting.bytes, waiting.handed_in), (0, 0, 0));
        assert!(waiting.line.is_empty(), "a call left in line");
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
        let small = gate.rooms(CALLS_AHEAD * 4, 10).await;
        assert!(!gate.is_full());
        drop(small);
        all_given_back(&gate);
        // Large calls: the first CALLS_AHEAD go in whatever their size.
        let mut rooms = gate.rooms(CALLS_AHEAD, BYTES_AHEAD).await;
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
        all_given_back(&gate);
    }

    #[tokio::test]
    async fn no_more_than_a_group_waits_beyond_the_calls() {
        let gate = Arc::new(ShredGate::new(1_000));
        let rooms = gate.rooms(CALLS_AHEAD, 400).await;
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
        let mut rooms = gate.rooms(CALLS_AHEAD, 10).await;
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
        all_given_back(&gate);
    }

    #[tokio::test]
    async fn a_call_in_its_turn_goes_in_while_a_room_is_not_handed_in() {
        let gate = Arc::new(ShredGate::default());
        let _full = gate.fill().await;
        let turn = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let changed = Arc::new(Notify::new());
        let waiting = {
            let (gate, turn, changed) = (gate.clone(), turn.clone(), changed.clone());
            tokio::spawn(async move {
                let standing = || match turn.load(std::sync::atomic::Ordering::SeqCst) {
                    true => Standing::Turn,
                    false => Standing::InLine,
                };
                gate.enter((5, 0), standing, &changed).await
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

    #[tokio::test]
    async fn a_call_arriving_later_does_not_take_the_room_a_waiting_call_is_owed() {
        let gate = Arc::new(ShredGate::default());
        let rooms = gate.fill().await;
        let earlier = spawn_call(&gate, 1);
        // It would claim its exactly-once positions first.
        room_given_back_goes_to(&gate, rooms, earlier, 0).await;
    }

    /// With every room taken and `waiting` blocked, one room is given back and a call of
    /// `later_priority` comes before the waiting one runs again: it must not take it.
    async fn room_given_back_goes_to(
        gate: &Arc<ShredGate>,
        mut rooms: Vec<Room>,
        waiting: tokio::task::JoinHandle<(Room, bool)>,
        later_priority: u64,
    ) {
        use futures::FutureExt;
        a_moment().await;
        assert!(!waiting.is_finished());
        rooms.pop();
        let never = Notify::new();
        let later = gate
            .enter((1, later_priority), || Standing::InLine, &never)
            .now_or_never();
        assert!(
            later.is_none(),
            "a later call took the room a waiting one is owed"
        );
        let (room, waited) = entered(waiting, "the waiting call gets the room").await;
        assert!(waited);
        drop((room, rooms));
        all_given_back(gate);
    }

    #[tokio::test]
    async fn a_call_in_its_turn_waits_while_every_room_is_handed_in() {
        let gate = Arc::new(ShredGate::default());
        let mut rooms = gate.fill().await;
        rooms.iter_mut().for_each(Room::hand_in);
        let turn = spawn_entering(&gate, (1, 0), Standing::Turn);
        a_moment().await;
        assert!(
            !turn.is_finished(),
            "went in although the encoder will free a room whatever it does"
        );
        rooms.pop();
        let (room, waited) = entered(turn, "a room given back lets it in").await;
        assert!(waited);
        drop((room, rooms));
        all_given_back(&gate);
    }

    #[tokio::test]
    async fn only_a_call_in_its_turn_or_together_goes_past_a_full_gate() {
        let gate = Arc::new(ShredGate::default());
        let rooms = gate.fill().await;
        // Calls that have not handed in fill the gate: they may be waiting for the
        // call in its turn.
        let (turn, _) = entered(spawn_entering(&gate, (1, 0), Standing::Turn), "its turn").await;
        let (together, _) = entered(
            spawn_entering(&gate, (1, 0), Standing::Together),
            "together",
        )
        .await;
        let in_line = spawn_entering(&gate, (1, 0), Standing::InLine);
        a_moment().await;
        assert!(!in_line.is_finished());
        assert_eq!(gate.waiting.locked().calls, CALLS_AHEAD + 2);
        assert_eq!(gate.waiting.locked().handed_in, 0);
        drop((turn, together, rooms));
        let (room, _) = entered(in_line, "rooms given back").await;
        drop(room);
        all_given_back(&gate);
    }

    #[tokio::test]
    async fn a_gate_with_calls_in_line_is_full() {
        let gate = Arc::new(ShredGate::default());
        let _rooms = gate.rooms(CALLS_AHEAD, 10).await;
        assert!(!gate.is_full(), "the bytes leave room");
        let large = spawn_call(&gate, BYTES_AHEAD);
        a_moment().await;
        assert!(!large.is_finished());
        assert!(
            gate.is_full(),
            "a call waits in line: none still shredding can hand in rows, so a group \
             gathering for them waits in vain"
        );
    }

    #[tokio::test]
    async fn calls_in_their_turn_do_not_pile_up_behind_one_room_not_handed_in() {
        let gate = Arc::new(ShredGate::default());
        let mut rooms = gate.fill().await;
        // The first room's call waits for earlier calls (it has not handed in); the
        // rest are handed in. Calls then take their turn one after another.
        rooms[1..].iter_mut().for_each(Room::hand_in);
        let mut passed = 0;
        for _ in 0..4 * CALLS_AHEAD {
            let call = spawn_entering(&gate, (1, 0), Standing::Turn);
            a_moment().await;
            if !call.is_finished() {
                call.abort();
                break;
            }
            let (mut room, _) = call.await.unwrap();
            room.hand_in();
            rooms.push(room);
            passed += 1;
        }
        assert_eq!(
            passed, 0,
            "calls in their turn went past a gate full of rows handed in"
        );
    }

    #[tokio::test]
    async fn a_call_in_its_turn_goes_in_when_small_calls_yet_to_hand_in_fill_the_calls() {
        // Found by tests/upsert_order.rs: eight small calls that wait for the call in its
        // turn hold every room, their bytes far under the limit, and another call waits in
        // line (which turns the bytes rule off for those in line).
        let gate = Arc::new(ShredGate::new(4_096));
        let _rooms = gate.rooms(CALLS_AHEAD, 100).await;
        let in_line = spawn_call(&gate, 100_000);
        a_moment().await;
        assert!(!in_line.is_finished());
        let turn = spawn_entering(&gate, (1, 0), Standing::Turn);
        let (room, _) = entered(turn, "the calls holding the room wait for it").await;
        drop(room);
        in_line.abort();
    }

    #[tokio::test]
    async fn an_earlier_ordered_call_gets_room_before_a_later_one_that_waited_longer() {
        let gate = Arc::new(ShredGate::default());
        let mut rooms = gate.fill().await;
        let in_line = |ticket: u64| spawn_entering(&gate, (1, ticket), Standing::InLine);
        // A redelivery (ticket 9) reached the gate before the call it repeats (ticket 5).
        let later = in_line(9);
        a_moment().await;
        let earlier = in_line(5);
        a_moment().await;
        rooms.pop();
        let (room, _) = entered(earlier, "the earlier call gets the room").await;
        assert!(!later.is_finished(), "the later call got ahead of it");
        drop((room, rooms));
        let (room, _) = entered(later, "then the later one").await;
        drop(room);
        all_given_back(&gate);
    }

    #[tokio::test]
    async fn a_later_call_does_not_take_the_room_a_call_in_its_turn_waits_for() {
        let gate = Arc::new(ShredGate::default());
        let mut rooms = gate.fill().await;
        // The rooms not handed in alone would leave the call in its turn room: it waits.
        rooms[0].hand_in();
        let turn = spawn_entering(&gate, (1, 5), Standing::Turn);
        room_given_back_goes_to(&gate, rooms, turn, 6).await;
    }
}
