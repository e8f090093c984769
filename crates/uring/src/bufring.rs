//! The thread's provided buffers: a few fixed-size buffers registered with the kernel as a
//! buffer ring, from which a read takes one only when its bytes arrive.
//!
//! Why: a connection waiting for its next request used to keep a read in flight with a buffer
//! of its own, so a thousand idle connections held a thousand buffers, and the kernel wrote each
//! request into whichever of them had long left the cache. With a buffer ring an idle read holds
//! nothing; the bytes land in one of a few buffers that were in use a moment ago, and the stream
//! gives the buffer back ([`BufRing::give_back`]) once its reader has copied them all out.
//!
//! Ownership rule: a buffer is the kernel's from the moment it is in the ring until a
//! completion names it; then it is the driver's, lent to the stream whose read it was, until
//! given back. The ring's memory is never unmapped once registered (see [`BufRing::register`]).

use std::io;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The buffer group reads name: the thread's only one.
pub(crate) const GROUP: u16 = 0;
/// Buffers in the ring (a power of two). A buffer is out of it from a read's completion until
/// its reader has taken all its bytes (at once, mostly), so this bounds the reads completed in
/// one turn of the worker's loop; beyond it a read brings its own buffer (`ENOBUFS`, see
/// [`crate::UringTcp`]).
const COUNT: u16 = 128;
/// Bytes per buffer: a 10 KB body and its head arrive in one read.
pub(crate) const SIZE: usize = 16 * 1024;
/// The ring's entries take the mapping's first page (the kernel wants them page-aligned).
const PAGE: usize = 4096;
/// The whole mapping: the entries' page, then the buffers.
const MAPPED: usize = PAGE + COUNT as usize * SIZE;

pub(crate) struct BufRing {
    /// `COUNT` entries, page-aligned; the tail the kernel reads overlays the first one's
    /// reserved field.
    entries: NonNull<BufRingEntry>,
    /// `COUNT * SIZE` bytes, buffer `bid` at `bid * SIZE`.
    mem: NonNull<u8>,
    /// Entries added so far (wrapping): the next one goes at `tail % COUNT`.
    tail: u16,
}

impl BufRing {
    /// Maps the buffers and registers them with `ring` as [`GROUP`]. On success the memory is
    /// never unmapped: the kernel may write into a buffer until the ring is torn down,
    /// which finishes after the ring's descriptor is closed, so a worker thread that exits
    /// leaks its ring's buffers (once, at exit).
    ///
    /// The memory is a mapping of its own rather than the allocator's, so a page is only
    /// resident once the kernel has written into it: small messages touch only the first page
    /// of each buffer.
    pub(crate) fn register(ring: &IoUring) -> io::Result<Self> {
        const _: () = assert!(COUNT as usize * std::mem::size_of::<BufRingEntry>() <= PAGE);
        // SAFETY: a fresh private anonymous mapping, placed by the kernel: it aliases nothing.
        #[allow(unsafe_code)]
        let base = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                MAPPED,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        let base = NonNull::new(base.cast::<u8>())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let entries = base.cast::<BufRingEntry>();
        // SAFETY: `PAGE` is inside the mapping.
        #[allow(unsafe_code)]
        let mem = unsafe { base.add(PAGE) };
        // SAFETY: `entries` is page-aligned, zeroed as a fresh mapping is (a tail of 0: no
        // buffers yet) and lives as long as the ring, as the memory the entries will point at
        // does (never unmapped once registered).
        #[allow(unsafe_code)]
        let registered = unsafe {
            ring.submitter()
                .register_buf_ring(entries.as_ptr() as u64, COUNT, GROUP)
        };
        if let Err(e) = registered {
            // SAFETY: mapped above, and the kernel never saw it.
            #[allow(unsafe_code)]
            let _ = unsafe { munmap(base.as_ptr().cast(), MAPPED) };
            return Err(e);
        }
        let mut this = Self {
            entries,
            mem,
            tail: 0,
        };
        for bid in 0..COUNT {
            this.add(bid);
        }
        this.publish();
        Ok(this)
    }

    /// Puts buffer `bid` back in the ring, for the kernel to fill again.
    pub(crate) fn give_back(&mut self, bid: u16) {
        if bid < COUNT {
            self.add(bid);
            self.publish();
        }
    }

    /// Bytes `range` of buffer `bid`, which a completion named (so the kernel is done writing
    /// it) and which has not been given back.
    pub(crate) fn bytes(&self, bid: u16, range: Range<usize>) -> &[u8] {
        let bid = usize::from(bid.min(COUNT - 1));
        let end = range.end.min(SIZE);
        let start = range.start.min(end);
        // SAFETY: the range lies inside the buffer, inside `mem`, and under the module's rule
        // the kernel does not write it until it is given back, which needs `&mut self`.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.mem.as_ptr().add(bid * SIZE + start), end - start)
        }
    }

    fn add(&mut self, bid: u16) {
        let at = usize::from(self.tail & (COUNT - 1));
        // SAFETY: `at` is inside the entries, which the kernel only reads, and only up to the
        // published tail, which does not yet cover this one. The address is inside `mem`.
        #[allow(unsafe_code)]
        let entry = unsafe { &mut *self.entries.as_ptr().add(at) };
        #[allow(unsafe_code)]
        let addr = unsafe { self.mem.as_ptr().add(usize::from(bid) * SIZE) };
        entry.set_addr(addr as u64);
        entry.set_len(SIZE as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Tells the kernel about the entries added so far.
    fn publish(&self) {
        // SAFETY: the tail is a properly aligned u16 inside the first entry, which the kernel
        // reads concurrently: hence the atomic store, whose release orders the entries' writes
        // before it.
        #[allow(unsafe_code)]
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr()).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}
