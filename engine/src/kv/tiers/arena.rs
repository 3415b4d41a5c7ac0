//! Host memory for KV block records: equal slots cut from a few large allocations, reused as blocks come
//! and go, so copying a block down or back touches memory that is already mapped, and on CUDA already
//! pinned, which the copy engine reaches without a bounce through the driver's own buffers.
//!
//! The backend provides the allocations ([`HostAllocator`]); the arena grows a chunk at a time, up to a
//! limit, on a thread of its own: pinned memory all from the moment the arena is made
//! ([`BlockArena::eager`]; pinning is slow, about a second per GiB on some machines, which a copy on
//! the engine's path should not wait for), heap memory from its first use on, a few chunks ahead of need
//! (an engine that never moves a block down takes none). A buffer wanted
//! while every allocated slot is taken waits for the chunk under way, since a record outside pinned
//! memory moves several times slower; with the arena at its limit, it falls back to ordinary heap
//! memory.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::error::Result;

/// One allocation of host memory the arena cuts into slots. It must stay mapped, at the same address,
/// for as long as it lives.
pub trait HostMemory: Send + Sync {
    /// Its first byte.
    fn as_mut_ptr(&self) -> *mut u8;
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes host allocations of a given number of bytes.
pub type HostAllocator = Arc<dyn Fn(usize) -> Result<Box<dyn HostMemory>> + Send + Sync>;

/// Plain heap memory, every page written once so it is mapped before a copy needs it.
struct HeapMemory(Box<[u8]>);

impl HostMemory for HeapMemory {
    fn as_mut_ptr(&self) -> *mut u8 {
        self.0.as_ptr().cast_mut()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The allocator of backends without pinned memory: heap chunks, mapped at once.
pub fn heap_allocator() -> HostAllocator {
    Arc::new(|bytes| {
        let mut memory = vec![0u8; bytes].into_boxed_slice();
        for page in memory.chunks_mut(4096) {
            page[0] = 1;
        }
        Ok(Box::new(HeapMemory(memory)) as Box<dyn HostMemory>)
    })
}

/// Bytes of each chunk the arena allocates at most, so it grows in steps a copy does not wait long for.
const CHUNK_BYTES: usize = 256 << 20;

/// Free slots an arena that grows with need keeps ahead of it, in chunks.
const CHUNKS_AHEAD: usize = 2;

/// How long a buffer waits for a chunk under way at most before it falls back to heap memory.
const GROWTH_WAIT: Duration = Duration::from_secs(10);

/// Equal slots of host memory, one block record each.
pub struct BlockArena {
    slot_bytes: usize,
    max_slots: usize,
    chunk_slots: usize,
    /// Grows to its limit at once rather than with need.
    eager: bool,
    allocate: HostAllocator,
    state: Mutex<ArenaState>,
    grown: Condvar,
}

#[derive(Default)]
struct ArenaState {
    chunks: Vec<Box<dyn HostMemory>>,
    free: Vec<usize>,
    handed_out: usize,
    /// A chunk is being allocated.
    growing: bool,
    /// An allocation failed: the arena stays as it is.
    stopped: bool,
}

impl fmt::Debug for BlockArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockArena")
            .field("slot_bytes", &self.slot_bytes)
            .field("max_slots", &self.max_slots)
            .field("slots", &self.slots())
            .finish()
    }
}

impl BlockArena {
    /// An arena of at most `max_bytes` in slots of `slot_bytes`; its first chunk is allocated in the
    /// background.
    pub fn new(slot_bytes: usize, max_bytes: usize, allocate: HostAllocator) -> Arc<Self> {
        Self::with_chunks_of(CHUNK_BYTES, slot_bytes, max_bytes, (allocate, false))
    }

    /// An arena as [`BlockArena::new`] makes it, which grows to its limit in the background at once
    /// (for pinned memory, slow to allocate).
    pub fn eager(slot_bytes: usize, max_bytes: usize, allocate: HostAllocator) -> Arc<Self> {
        Self::with_chunks_of(CHUNK_BYTES, slot_bytes, max_bytes, (allocate, true))
    }

    fn with_chunks_of(
        chunk_bytes: usize,
        slot_bytes: usize,
        max_bytes: usize,
        (allocate, eager): (HostAllocator, bool),
    ) -> Arc<Self> {
        let slot_bytes = slot_bytes.max(1);
        let max_slots = max_bytes / slot_bytes;
        let arena = Arc::new(BlockArena {
            slot_bytes,
            max_slots,
            chunk_slots: (chunk_bytes / slot_bytes).clamp(1, max_slots.max(1)),
            eager,
            allocate,
            state: Mutex::new(ArenaState::default()),
            grown: Condvar::new(),
        });
        if eager {
            arena.grow_if_low(&mut arena.lock());
        }
        arena
    }

    /// Bytes of a slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Slots allocated so far.
    pub fn slots(&self) -> usize {
        let state = self.lock();
        state.chunks.len() * self.chunk_slots
    }

    /// Slots the arena may hold at most.
    pub fn capacity(&self) -> usize {
        self.max_slots / self.chunk_slots * self.chunk_slots
    }

    /// Slots not handed out, allocated yet or not (up to the limit).
    pub fn free_slots(&self) -> usize {
        let state = self.lock();
        let allocated = state.chunks.len() * self.chunk_slots;
        let in_use = state.handed_out - state.free.len();
        // The arena grows in whole chunks, up to the last that fits its limit.
        let most = if state.stopped {
            allocated
        } else {
            self.max_slots / self.chunk_slots * self.chunk_slots
        };
        most.saturating_sub(in_use)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ArenaState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A free slot, waiting for a chunk under way when none is free; None when the arena is at its
    /// limit (or cannot grow) and every slot is taken. Taking a slot keeps the arena growing ahead.
    fn take(self: &Arc<Self>) -> Option<BlockBuf> {
        let mut state = self.lock();
        let slot = loop {
            let allocated = state.chunks.len() * self.chunk_slots;
            if let Some(slot) = state.free.pop() {
                break slot;
            }
            if state.handed_out < allocated {
                state.handed_out += 1;
                break state.handed_out - 1;
            }
            self.grow_if_low(&mut state);
            if !state.growing {
                return None;
            }
            let (next, waited) = self
                .grown
                .wait_timeout(state, GROWTH_WAIT)
                .unwrap_or_else(|e| e.into_inner());
            state = next;
            if waited.timed_out() {
                return None;
            }
        };
        self.grow_if_low(&mut state);
        let chunk = &state.chunks[slot / self.chunk_slots];
        let offset = (slot % self.chunk_slots) * self.slot_bytes;
        debug_assert!(offset + self.slot_bytes <= chunk.len());
        // SAFETY: the slot lies inside a chunk the arena keeps for its whole life (the buffer holds the
        // arena), and a slot is handed to one buffer at a time: it returns to the free list only when that
        // buffer is dropped.
        let ptr = unsafe { chunk.as_mut_ptr().add(offset) };
        Some(BlockBuf::of(Storage::Slot {
            arena: Arc::clone(self),
            slot,
            ptr,
        }))
    }

    /// Waits up to `timeout` until the arena has grown to its limit (or cannot grow); whether it has.
    pub fn wait_grown(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.lock();
        loop {
            if !state.growing {
                return true;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .grown
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Starts allocating a chunk on its own thread when none is under way, the limit allows and (an
    /// arena growing with need) fewer than [`CHUNKS_AHEAD`] chunks of slots are free.
    fn grow_if_low(self: &Arc<Self>, state: &mut ArenaState) {
        let allocated = state.chunks.len() * self.chunk_slots;
        let spare = state.free.len() + allocated - state.handed_out;
        if state.growing
            || state.stopped
            || (!self.eager && spare >= CHUNKS_AHEAD * self.chunk_slots)
            || allocated + self.chunk_slots > self.max_slots
        {
            return;
        }
        state.growing = true;
        let arena = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("docqa-kv-arena".into())
            .spawn(move || {
                let chunk = (arena.allocate)(arena.chunk_slots * arena.slot_bytes);
                let mut state = arena.lock();
                state.growing = false;
                match chunk {
                    Ok(chunk) => {
                        state.chunks.push(chunk);
                        arena.grow_if_low(&mut state);
                    }
                    Err(why) => {
                        state.stopped = true;
                        tracing::warn!(%why, "host memory for the KV host tier could not be allocated; blocks use ordinary heap memory");
                    }
                }
                arena.grown.notify_all();
            });
        if spawned.is_err() {
            state.growing = false;
        }
    }

    fn give_back(&self, slot: usize) {
        self.lock().free.push(slot);
    }
}

/// A device's writes into host memory that may still be under way (an offload copying a block into
/// its record asynchronously).
pub trait DeviceFence: Send + Sync {
    /// Waits until the writes are done; false when the device failed, so the bytes are not whole.
    fn wait(&self) -> bool;
}

/// The bytes of one block record: an arena slot or, failing that, a heap buffer. A device may still
/// be writing it ([`BlockBuf::written_by`]): reading it, through `Deref`, or letting its slot go waits
/// for the device first, so no reader ever sees a record half written.
pub struct BlockBuf {
    storage: Storage,
    pending: Option<Arc<dyn DeviceFence>>,
    /// The pending writes are known done (and whether they succeeded), so reads need not ask again.
    settled: OnceLock<bool>,
}

enum Storage {
    Heap(Vec<u8>),
    Slot {
        arena: Arc<BlockArena>,
        slot: usize,
        ptr: *mut u8,
    },
}

// SAFETY: a slot's memory belongs to this buffer alone while it lives (see `BlockArena::take`), as a
// Vec's would; the arena it points into is Send + Sync.
unsafe impl Send for BlockBuf {}
// SAFETY: shared access only reads the slot.
unsafe impl Sync for BlockBuf {}

impl BlockBuf {
    fn of(storage: Storage) -> Self {
        BlockBuf {
            storage,
            pending: None,
            settled: OnceLock::new(),
        }
    }

    /// A buffer of `arena`'s slot size: a slot when one is free, else zeroed heap memory.
    pub fn new_in(arena: &Arc<BlockArena>) -> Self {
        arena
            .take()
            .unwrap_or_else(|| BlockBuf::of(Storage::Heap(vec![0; arena.slot_bytes])))
    }

    /// Whether the bytes live in an arena slot.
    pub fn in_arena(&self) -> bool {
        matches!(self.storage, Storage::Slot { .. })
    }

    /// Its length in bytes (known without waiting for a device still writing it).
    pub fn len(&self) -> usize {
        match &self.storage {
            Storage::Heap(v) => v.len(),
            Storage::Slot { arena, .. } => arena.slot_bytes,
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its first byte's address, for a device to write or read it in stream order (without waiting
    /// for writes under way).
    pub fn as_ptr(&self) -> *const u8 {
        match &self.storage {
            Storage::Heap(v) => v.as_ptr(),
            Storage::Slot { ptr, .. } => *ptr,
        }
    }

    /// Marks the buffer as being written by a device until `fence` (after writes the caller has
    /// just issued into it).
    pub fn written_by(&mut self, fence: Arc<dyn DeviceFence>) {
        self.pending = Some(fence);
        self.settled = OnceLock::new();
    }

    /// Waits for a device still writing the buffer; false when that device failed, so the bytes
    /// must not be believed (a disk write skips them).
    pub fn settle(&self) -> bool {
        *self
            .settled
            .get_or_init(|| self.pending.as_ref().is_none_or(|f| f.wait()))
    }
}

impl From<Vec<u8>> for BlockBuf {
    fn from(bytes: Vec<u8>) -> Self {
        BlockBuf::of(Storage::Heap(bytes))
    }
}

impl Deref for BlockBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.settle();
        match &self.storage {
            Storage::Heap(v) => v,
            // SAFETY: see `BlockArena::take`; the slot is `slot_bytes` long and this buffer's alone.
            Storage::Slot { arena, ptr, .. } => unsafe {
                std::slice::from_raw_parts(*ptr, arena.slot_bytes)
            },
        }
    }
}

impl DerefMut for BlockBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.settle();
        match &mut self.storage {
            Storage::Heap(v) => v,
            // SAFETY: as for `deref`, and `&mut self` makes this the only access.
            Storage::Slot { arena, ptr, .. } => unsafe {
                std::slice::from_raw_parts_mut(*ptr, arena.slot_bytes)
            },
        }
    }
}

impl Drop for BlockBuf {
    fn drop(&mut self) {
        // The slot must not be handed out again under a device still writing it.
        self.settle();
        if let Storage::Slot { arena, slot, .. } = &self.storage {
            arena.give_back(*slot);
        }
    }
}

impl PartialEq for BlockBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl fmt::Debug for BlockBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BlockBuf({} bytes{})",
            self.len(),
            if self.in_arena() {
                ", in the arena"
            } else {
                ""
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn counting_allocator(calls: Arc<AtomicUsize>) -> HostAllocator {
        let heap = heap_allocator();
        Arc::new(move |bytes| {
            calls.fetch_add(1, Ordering::SeqCst);
            heap(bytes)
        })
    }

    #[test]
    fn slots_are_reused_after_their_buffer_is_dropped_and_never_shared() {
        let calls = Arc::new(AtomicUsize::new(0));
        let arena = BlockArena::new(100, 300, counting_allocator(Arc::clone(&calls)));
        let mut bufs: Vec<BlockBuf> = (0..3).map(|_| BlockBuf::new_in(&arena)).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.in_arena(), "a buffer waits for the chunk under way");
            b.fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 1),
                "slot {i} was overwritten"
            );
        }
        let spill = BlockBuf::new_in(&arena);
        assert!(!spill.in_arena(), "a full arena hands out heap buffers");
        assert_eq!(spill.len(), 100);
        drop(bufs.remove(1));
        let again = BlockBuf::new_in(&arena);
        assert!(again.in_arena(), "a dropped buffer's slot is free again");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "one chunk held all three slots"
        );
    }

    fn chunks_of_two_slots_up_to_nine(calls: &Arc<AtomicUsize>, eager: bool) -> Arc<BlockArena> {
        // Four chunks fit the limit, a fifth would pass it.
        let allocate = counting_allocator(Arc::clone(calls));
        BlockArena::with_chunks_of(200, 100, 900, (allocate, eager))
    }

    #[test]
    fn a_heap_arena_grows_ahead_of_need_a_chunk_at_a_time_up_to_its_limit() {
        let calls = Arc::new(AtomicUsize::new(0));
        let arena = chunks_of_two_slots_up_to_nine(&calls, false);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(arena.slots(), 0, "nothing taken before the first need");
        let first = BlockBuf::new_in(&arena);
        assert!(first.in_arena(), "the first need waits for its chunk");
        assert!(arena.wait_grown(Duration::from_secs(10)));
        assert_eq!(arena.slots(), 6, "two chunks free ahead of need");
        let taken: Vec<BlockBuf> = (0..4).map(|_| BlockBuf::new_in(&arena)).collect();
        assert!(taken.iter().all(BlockBuf::in_arena));
        assert!(arena.wait_grown(Duration::from_secs(10)));
        let rest: Vec<BlockBuf> = (0..4).map(|_| BlockBuf::new_in(&arena)).collect();
        assert_eq!(rest.iter().filter(|b| b.in_arena()).count(), 3);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!((calls.load(Ordering::SeqCst), arena.slots()), (4, 8));
    }

    #[test]
    fn an_eager_arena_grows_to_its_limit_in_the_background_before_any_slot_is_asked_for() {
        let calls = Arc::new(AtomicUsize::new(0));
        let arena = chunks_of_two_slots_up_to_nine(&calls, true);
        assert!(arena.wait_grown(Duration::from_secs(10)));
        assert_eq!(
            (
                calls.load(Ordering::SeqCst),
                arena.slots(),
                arena.free_slots()
            ),
            (4, 8, 8),
            "grown before any slot was asked for"
        );
        let taken: Vec<BlockBuf> = (0..9).map(|_| BlockBuf::new_in(&arena)).collect();
        assert_eq!(taken.iter().filter(|b| b.in_arena()).count(), 8);
        assert_eq!(arena.free_slots(), 0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), 4, "never past its limit");
    }

    /// A device that "writes" `value` into the buffer at `ptr` only when waited for, so a read that
    /// did not wait would see the old bytes.
    struct LateWrite {
        ptr: usize,
        len: usize,
        value: u8,
        ok: bool,
        waits: AtomicUsize,
    }

    impl DeviceFence for LateWrite {
        fn wait(&self) -> bool {
            if self.waits.fetch_add(1, Ordering::SeqCst) == 0 {
                // SAFETY: the test keeps the buffer alive while its fence can be waited for.
                unsafe { std::ptr::write_bytes(self.ptr as *mut u8, self.value, self.len) };
            }
            self.ok
        }
    }

    fn late_write(buf: &BlockBuf, value: u8, ok: bool) -> Arc<LateWrite> {
        Arc::new(LateWrite {
            ptr: buf.as_ptr() as usize,
            len: buf.len(),
            value,
            ok,
            waits: AtomicUsize::new(0),
        })
    }

    #[test]
    fn a_buffer_a_device_is_writing_is_read_and_given_back_only_after_the_write() {
        let arena = BlockArena::new(64, 128, heap_allocator());
        let mut buf = BlockBuf::new_in(&arena);
        assert!(buf.in_arena());
        let fence = late_write(&buf, 7, true);
        buf.written_by(Arc::clone(&fence) as Arc<dyn DeviceFence>);
        assert_eq!(
            (buf.len(), fence.waits.load(Ordering::SeqCst)),
            (64, 0),
            "its length is known without waiting"
        );
        assert!(buf.iter().all(|&b| b == 7), "a read waits for the write");
        assert!(buf.settle());
        assert_eq!(fence.waits.load(Ordering::SeqCst), 1, "waited for once");
        // A slot given back while still being written waits for the write first.
        let mut second = BlockBuf::new_in(&arena);
        let late = late_write(&second, 9, true);
        second.written_by(Arc::clone(&late) as Arc<dyn DeviceFence>);
        drop(second);
        assert_eq!(late.waits.load(Ordering::SeqCst), 1);
        // A failed device write is reported, so its bytes are not believed.
        let mut failed = BlockBuf::from(vec![0u8; 8]);
        failed.written_by(late_write(&failed, 1, false));
        assert!(!failed.settle());
    }

    #[test]
    fn a_failed_allocation_falls_back_to_the_heap() {
        let arena = BlockArena::new(
            64,
            1 << 20,
            Arc::new(|_| Err(crate::EngineError::InvalidConfig("no memory".into()))),
        );
        let b = BlockBuf::new_in(&arena);
        assert!(!b.in_arena());
        assert_eq!(&b[..], &[0u8; 64][..]);
        assert_eq!(arena.slots(), 0);
    }
}
