//! The thread's ring: operations queued by streams, submitted in one `io_uring_enter` just
//! before the runtime parks, and their completions handed back through per-operation slots.
//!
//! Ownership rule that makes the `unsafe` pushes sound: a buffer given to the kernel stays
//! where it is until that operation's completion has been reaped. A send's buffer moves into its
//! slot ([`Slot::Sending`]) and is freed as soon as the completion says all of it went, so a
//! connection that answered and went idle holds no write buffer; one that did not all go is
//! handed back to the stream. A read's buffer stays with its stream, which does not touch it
//! while the read is in flight; when the stream is dropped first, the buffer moves into the slot
//! ([`Slot::Orphan`]) and is freed on completion. Where no driver is left to take them (the
//! thread is exiting), buffers are leaked instead.
//! A read that took one of the ring's provided buffers ([`crate::bufring`]) names it in its
//! completion; whoever takes the completion gives the buffer back, the driver itself when
//! nobody will.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use io_uring::{cqueue, opcode, squeue, IoUring};

use crate::bufring::BufRing;

/// How an operation ended.
#[derive(Debug)]
pub(crate) struct Completion {
    /// Bytes, or a negated errno.
    pub(crate) res: i32,
    /// The provided buffer a read's bytes are in, which the taker must give back.
    pub(crate) buffer: Option<u16>,
    /// A send's buffer, when not all of it went, and how much had gone before this send.
    pub(crate) unsent: Option<(Vec<u8>, usize)>,
}

/// `user_data` of cancel requests, whose completions nobody waits for.
const CANCEL: u64 = u64::MAX;

/// Ids of rings, so a stream can tell its own thread's driver from another's.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
}

/// Where one operation stands.
enum Slot {
    Free,
    /// Queued or submitted; the task to wake on completion.
    Waiting(Option<Waker>),
    /// A send in flight: bytes `sent..` of `buf` were submitted.
    Sending {
        waker: Option<Waker>,
        buf: Vec<u8>,
        sent: usize,
    },
    /// Completed, not yet taken.
    Done(Completion),
    /// Its stream is gone; the buffer is freed when the completion comes.
    Orphan(Vec<u8>),
}

pub(crate) struct Driver {
    id: u64,
    ring: IoUring,
    /// Buffers for reads that take theirs when bytes arrive; `None` where the kernel refused
    /// them (reads then bring their own).
    bufs: Option<BufRing>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Entries pushed since the last submit.
    queued: bool,
    /// Wakers collected while reaping, woken once the driver is no longer borrowed.
    wake: Vec<Waker>,
}

impl Driver {
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        loop {
            let mut sq = self.ring.submission();
            if !sq.is_full() {
                // SAFETY: every entry pushed here points at a buffer owned under the module's
                // rule (kept in place until its completion is reaped), or at no buffer.
                #[allow(unsafe_code)]
                let pushed = unsafe { sq.push(entry) };
                if pushed.is_ok() {
                    self.queued = true;
                    return Ok(());
                }
            }
            drop(sq);
            self.ring.submit()?;
            self.queued = false;
        }
    }

    fn submit(&mut self) {
        // Completions waiting to be posted (the ring does not interrupt the thread for them,
        // see `install`) are posted by any `io_uring_enter`.
        if self.queued || self.ring.submission().taskrun() {
            // An error here (EBUSY while the completion queue overflows) leaves the entries
            // queued; the next park tries again.
            if self.ring.submit().is_ok() {
                self.queued = false;
            }
        }
    }

    fn reap(&mut self) {
        let Self {
            ring,
            bufs,
            slots,
            free,
            wake,
            ..
        } = self;
        for cqe in ring.completion() {
            let data = cqe.user_data();
            let buffer = cqueue::buffer_select(cqe.flags());
            let slot = match slots.get_mut(data as usize) {
                Some(slot) if data != CANCEL => slot,
                _ => {
                    give_back(bufs, buffer);
                    continue;
                }
            };
            let res = cqe.result();
            match std::mem::replace(slot, Slot::Free) {
                Slot::Waiting(waker) => {
                    *slot = Slot::Done(Completion {
                        res,
                        buffer,
                        unsent: None,
                    });
                    wake.extend(waker);
                }
                Slot::Sending { waker, buf, sent } => {
                    let all = usize::try_from(res).is_ok_and(|n| sent + n >= buf.len());
                    // All of it went: freed here, not when the stream next writes.
                    let unsent = (!all).then_some((buf, sent));
                    *slot = Slot::Done(Completion {
                        res,
                        buffer,
                        unsent,
                    });
                    wake.extend(waker);
                }
                Slot::Orphan(buf) => {
                    drop(buf);
                    give_back(bufs, buffer);
                    free.push(data as u32);
                }
                other => {
                    *slot = other;
                    give_back(bufs, buffer);
                }
            }
        }
    }

    /// Takes a free slot in state `first`, queues `entry` (built with the slot's `user_data`)
    /// and returns the slot. When the entry cannot be queued the slot is free again, and what
    /// `first` held (a send's buffer, which the kernel never saw) is dropped.
    fn queue(&mut self, first: Slot, entry: impl FnOnce(u64) -> squeue::Entry) -> io::Result<u32> {
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = first;
                i
            }
            None => {
                self.slots.push(first);
                (self.slots.len() - 1) as u32
            }
        };
        match self.push(&entry(u64::from(slot))) {
            Ok(()) => Ok(slot),
            Err(e) => {
                self.slots[slot as usize] = Slot::Free;
                self.free.push(slot);
                Err(e)
            }
        }
    }
}

/// Returns a provided buffer that a completion named to the ring.
fn give_back(bufs: &mut Option<BufRing>, buffer: Option<u16>) {
    if let (Some(bufs), Some(bid)) = (bufs, buffer) {
        bufs.give_back(bid);
    }
}

impl Drop for Driver {
    /// The thread is ending with operations in flight: closing the ring cancels them, but not
    /// before this returns, so their buffers are leaked rather than freed under the kernel.
    fn drop(&mut self) {
        for slot in self.slots.drain(..) {
            if let Slot::Orphan(buf) | Slot::Sending { buf, .. } = slot {
                std::mem::forget(buf);
            }
        }
    }
}

/// Builds a ring of `entries` submission entries for this thread and installs it. Returns a
/// descriptor of the ring (a duplicate, owned), which [`crate::drive`] watches for
/// completions.
pub(crate) fn install(entries: u32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    // COOP_TASKRUN: a completion does not interrupt the running thread (an inter-processor
    // interrupt, paid by whoever sent the bytes); it is posted the next time the thread enters
    // the kernel, which a busy worker does all the time, and a sleeping one is woken for.
    // TASKRUN_FLAG says when such completions wait, so `submit` can post them before the
    // worker parks. SINGLE_ISSUER: only this thread ever submits.
    let ring = IoUring::builder()
        .setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer()
        .build(entries)?;
    let fd = ring.as_fd().try_clone_to_owned()?;
    // A kernel without buffer rings (before 5.19) still runs reads with their own buffers.
    let bufs = BufRing::register(&ring).ok();
    DRIVER.with(|d| {
        *d.borrow_mut() = Some(Driver {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ring,
            bufs,
            slots: Vec::new(),
            free: Vec::new(),
            queued: false,
            wake: Vec::new(),
        })
    });
    Ok(fd)
}

/// Runs `f` on this thread's driver if it is the one with `id` (any, for `None`), then wakes
/// the tasks whose operations completed meanwhile. `None` when there is no such driver.
fn with<R>(id: Option<u64>, f: impl FnOnce(&mut Driver) -> R) -> Option<R> {
    let (out, wake) = DRIVER
        .try_with(|d| {
            let mut d = d.try_borrow_mut().ok()?;
            let d = d.as_mut()?;
            if id.is_some_and(|id| id != d.id) {
                return None;
            }
            let out = f(d);
            Some((out, std::mem::take(&mut d.wake)))
        })
        .ok()
        .flatten()?;
    let mut wake = wake;
    for w in wake.drain(..) {
        w.wake();
    }
    // Give the (now empty) vector back, to keep its capacity.
    let _ = DRIVER.try_with(|d| {
        if let Ok(mut d) = d.try_borrow_mut() {
            if let Some(d) = d.as_mut() {
                if d.wake.is_empty() {
                    d.wake = wake;
                }
            }
        }
    });
    Some(out)
}

/// The id of this thread's driver, if it has one.
pub(crate) fn current() -> Option<u64> {
    with(None, |d| d.id)
}

/// Submits what is queued and takes what has completed: the runtime's before-park hook.
pub(crate) fn submit_and_reap() {
    with(None, |d| {
        d.submit();
        d.reap();
    });
}

/// Takes what has completed (the ring's file descriptor said so).
pub(crate) fn reap() {
    with(None, Driver::reap);
}

/// The error for a stream used on a thread whose driver is not its own.
pub(crate) fn foreign() -> io::Error {
    io::Error::other("io_uring stream used outside the worker thread that created it")
}

/// Queues `entry` (built with the slot's `user_data`) and returns its slot.
pub(crate) fn start(id: u64, entry: impl FnOnce(u64) -> squeue::Entry) -> io::Result<u32> {
    with(Some(id), |d| d.queue(Slot::Waiting(None), entry)).unwrap_or_else(|| Err(foreign()))
}

/// Whether this thread's driver `id` has provided buffers for reads.
pub(crate) fn provides_buffers(id: u64) -> bool {
    with(Some(id), |d| d.bufs.is_some()).unwrap_or(false)
}

/// Runs `f` on bytes `range` of provided buffer `bid`, and gives the buffer back when `f` says
/// it is done with it. `None` when the driver is not this thread's.
pub(crate) fn read_buffer<R>(
    id: u64,
    bid: u16,
    range: std::ops::Range<usize>,
    f: impl FnOnce(&[u8]) -> (R, bool),
) -> Option<R> {
    with(Some(id), |d| {
        let bufs = d.bufs.as_mut()?;
        let (out, done) = f(bufs.bytes(bid, range));
        if done {
            bufs.give_back(bid);
        }
        Some(out)
    })
    .flatten()
}

/// Gives back provided buffer `bid` unread (its stream is gone).
pub(crate) fn return_buffer(id: u64, bid: u16) {
    with(Some(id), |d| give_back(&mut d.bufs, Some(bid)));
}

/// Queues a send of bytes `sent..` of `buf`, which the slot keeps until the kernel is done
/// with it (`entry` gets the `user_data`, and the bytes' address and length); returns the slot.
pub(crate) fn start_send(
    id: u64,
    buf: Vec<u8>,
    sent: usize,
    entry: impl FnOnce(u64, *const u8, u32) -> squeue::Entry,
) -> io::Result<u32> {
    let rest = buf.get(sent..).unwrap_or_default();
    // The bytes stay where they are when `buf` moves into the slot: a vector's heap buffer
    // does not move with it.
    let (ptr, len) = (rest.as_ptr(), u32::try_from(rest.len()).unwrap_or(u32::MAX));
    let first = Slot::Sending {
        waker: None,
        buf,
        sent,
    };
    with(Some(id), |d| d.queue(first, |data| entry(data, ptr, len)))
        .unwrap_or_else(|| Err(foreign()))
}

/// How the operation in `slot` ended, once it has (the slot is then free again); until then
/// `cx`'s waker is kept to be woken. A provided buffer in it must be given back.
pub(crate) fn poll(id: u64, slot: u32, cx: &mut Context<'_>) -> Poll<io::Result<Completion>> {
    with(Some(id), |d| {
        let s = &mut d.slots[slot as usize];
        match std::mem::replace(s, Slot::Free) {
            Slot::Done(done) => {
                d.free.push(slot);
                Poll::Ready(Ok(done))
            }
            Slot::Waiting(mut waker) => {
                keep(&mut waker, cx);
                *s = Slot::Waiting(waker);
                Poll::Pending
            }
            Slot::Sending {
                mut waker,
                buf,
                sent,
            } => {
                keep(&mut waker, cx);
                *s = Slot::Sending { waker, buf, sent };
                Poll::Pending
            }
            other @ (Slot::Free | Slot::Orphan(_)) => {
                *s = other;
                Poll::Ready(Err(io::Error::other(
                    "io_uring operation polled after it was taken",
                )))
            }
        }
    })
    .unwrap_or_else(|| Poll::Ready(Err(foreign())))
}

/// Keeps `cx`'s waker in `waker`, unless the one there would wake the same task.
fn keep(waker: &mut Option<Waker>, cx: &Context<'_>) {
    match waker {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *waker = Some(cx.waker().clone()),
    }
}

/// Bytes of buffer the operation in `slot` holds in the driver.
#[cfg(test)]
pub(crate) fn held(id: u64, slot: u32) -> usize {
    with(Some(id), |d| match &d.slots[slot as usize] {
        Slot::Sending { buf, .. } | Slot::Orphan(buf) => buf.capacity(),
        Slot::Done(done) => done.unsent.as_ref().map_or(0, |(buf, _)| buf.capacity()),
        Slot::Free | Slot::Waiting(_) => 0,
    })
    .unwrap_or(0)
}

/// Whether the operation in `slot` has completed, without waiting or registering a waker.
pub(crate) fn is_done(id: u64, slot: u32) -> bool {
    with(Some(id), |d| {
        matches!(d.slots[slot as usize], Slot::Done(..))
    })
    .unwrap_or(true)
}

/// Gives up the operations of a stream being dropped. Queued entries are submitted first, so
/// writes that fit the socket's buffer go out as they would on `close`; operations that are
/// still not complete then (a read waiting for data, a write waiting for the peer to read) are
/// cancelled, and their buffers kept until the kernel is done with them. `Err` gives the
/// buffers back when there is no driver to take them: the caller must leak them.
pub(crate) fn abandon(id: u64, ops: [(Option<u32>, Vec<u8>); 2]) -> Result<(), [Vec<u8>; 2]> {
    let mut ops = Some(ops);
    let done = with(Some(id), |d| {
        let Some(ops) = ops.take() else {
            return;
        };
        d.submit();
        d.reap();
        let mut cancels = false;
        for (slot, buf) in ops {
            let Some(slot) = slot else {
                continue;
            };
            let s = &mut d.slots[slot as usize];
            if let Slot::Done(done) = s {
                give_back(&mut d.bufs, done.buffer);
            }
            let s = &mut d.slots[slot as usize];
            let in_flight = match std::mem::replace(s, Slot::Free) {
                Slot::Waiting(_) => Some(buf),
                Slot::Sending { buf, .. } => Some(buf),
                _ => None,
            };
            if let Some(buf) = in_flight {
                *s = Slot::Orphan(buf);
                let cancel = opcode::AsyncCancel::new(u64::from(slot))
                    .build()
                    .user_data(CANCEL);
                // Cancel entries carry no buffer. If the queue cannot take one now, the
                // operation stays in flight until the peer acts; its buffer stays owned.
                cancels |= d.push(&cancel).is_ok();
            } else {
                *s = Slot::Free;
                d.free.push(slot);
            }
        }
        if cancels {
            d.submit();
        }
    });
    match (done, ops) {
        (Some(()), _) => Ok(()),
        (None, Some([(_, a), (_, b)])) => Err([a, b]),
        (None, None) => Ok(()),
    }
}
