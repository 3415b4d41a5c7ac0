//! Pulling the next skinny product's weights into L2 while the current one runs
//! (`prefetch_ahead` in `common.cuh`). A decode step at batch 1 is a chain of products that each
//! stream their weights once; between two of them the memory idles while the first one's last
//! warps finish and the second one's first loads go out. A product that knows which weights come
//! next can ask for them early, so that the next one's first reads find them in L2.
//!
//! No caller says what comes next: the backend learns it. Each skinny launch notes its weights as
//! the successor of the launch before it, keyed by the earlier launch's first weight address. A
//! decode step runs the same products in the same order every time, so after one step every
//! product knows its successor (the last layer's down product the LM head, the LM head the first
//! layer's q/k/v of the next step). A successor seen for the first time moves the graph epoch, so
//! that a step recorded before it was known is recorded again; one that changes later (another
//! path ran the same weights) is updated without that.
//!
//! Off by default; `DOCQA_CUDA_L2_AHEAD=start` prefetches as each warp starts, `tail` once its own
//! products are done; `DOCQA_CUDA_L2_AHEAD_MIB` caps what one launch prefetches (16 MiB; at most 256).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::CudaBackend;
use super::pdl::PdlArgs;

/// The most a launch prefetches, MiB (L2 holds some 50; each part stays far below 4 GiB, the most one
/// prefetch instruction takes).
const MAX_CAP_MIB: u64 = 256;

/// Up to three spans of device memory: (address, bytes), zero bytes where unused.
pub(super) type Spans = [(u64, u64); 3];

/// When the warps of a product issue the prefetch of the next one's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2AheadMode {
    Off,
    /// As each warp starts, before it waits for the previous kernel.
    Start,
    /// Once each warp's own products are done.
    Tail,
}

impl L2AheadMode {
    fn code(self) -> u8 {
        match self {
            L2AheadMode::Off => 0,
            L2AheadMode::Start => 1,
            L2AheadMode::Tail => 2,
        }
    }

    fn of_code(code: u8) -> Self {
        match code {
            1 => L2AheadMode::Start,
            2 => L2AheadMode::Tail,
            _ => L2AheadMode::Off,
        }
    }

    /// `start` or `tail`; anything else is off.
    pub fn parse(s: &str) -> Self {
        match s {
            "start" => L2AheadMode::Start,
            "tail" => L2AheadMode::Tail,
            _ => L2AheadMode::Off,
        }
    }
}

/// How the weights of a launch are read: one after the other (q, then k, then v), or side by side
/// (gate and up, row by row together).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reads {
    InTurn,
    SideBySide,
}

/// The switch, the cap and what was learned.
pub(super) struct L2Ahead {
    mode: AtomicU8,
    cap_bytes: AtomicU64,
    learned: Mutex<Learned>,
}

#[derive(Default)]
struct Learned {
    /// The first weight address of the last skinny launch.
    last: Option<u64>,
    /// What each launch (by its first weight address) should prefetch.
    next: HashMap<u64, Spans>,
}

/// The spans a launch should prefetch: its reads' leading bytes, `cap` in all.
fn leading_spans(reads: &[(u64, u64)], order: Reads, cap: u64) -> Spans {
    let mut spans = [(0, 0); 3];
    let mut left = cap;
    let each = cap / reads.len().max(1) as u64;
    for (span, &(at, bytes)) in spans.iter_mut().zip(reads) {
        let room = match order {
            Reads::InTurn => left,
            Reads::SideBySide => each,
        };
        let take = bytes.min(room) / 16 * 16;
        if at % 16 == 0 && take > 0 {
            *span = (at, take);
            left -= take;
        }
    }
    spans
}

impl L2Ahead {
    /// As the environment says (`DOCQA_CUDA_L2_AHEAD`, `DOCQA_CUDA_L2_AHEAD_MIB`); off on devices
    /// before compute capability 9.0.
    pub(super) fn from_env(cc: (i32, i32)) -> Self {
        let mode = match cc.0 >= 9 {
            true => std::env::var("DOCQA_CUDA_L2_AHEAD")
                .map_or(L2AheadMode::Off, |v| L2AheadMode::parse(&v)),
            false => L2AheadMode::Off,
        };
        let mib = std::env::var("DOCQA_CUDA_L2_AHEAD_MIB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(16)
            .min(MAX_CAP_MIB);
        L2Ahead {
            mode: AtomicU8::new(mode.code()),
            cap_bytes: AtomicU64::new(mib << 20),
            learned: Mutex::new(Learned::default()),
        }
    }

    fn mode(&self) -> L2AheadMode {
        L2AheadMode::of_code(self.mode.load(Ordering::Relaxed))
    }

    /// Notes a launch reading `reads` (address, bytes; the first its key) as the successor of the
    /// one before it; returns what this launch should prefetch, and whether a successor was seen for
    /// the first time.
    fn launch(&self, reads: &[(u64, u64)], order: Reads) -> (Spans, bool) {
        let Some(&(key, _)) = reads.first() else {
            return ([(0, 0); 3], false);
        };
        let spans = leading_spans(reads, order, self.cap_bytes.load(Ordering::Relaxed));
        let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
        let mut first_seen = false;
        if let Some(last) = learned.last.replace(key) {
            first_seen = learned.next.insert(last, spans).is_none();
        }
        let ahead = learned.next.get(&key).copied().unwrap_or([(0, 0); 3]);
        (ahead, first_seen)
    }
}

impl CudaBackend {
    /// Switches the prefetch of the next skinny product's weights into L2 ([`L2AheadMode`]); graphs
    /// recorded before are recorded again. Off before compute capability 9.0.
    pub fn set_l2_ahead(&self, mode: L2AheadMode) {
        let mode = if self.dev.cc.0 >= 9 {
            mode
        } else {
            L2AheadMode::Off
        };
        self.l2_ahead.mode.store(mode.code(), Ordering::Relaxed);
        self.bump_graph_epoch();
    }

    /// When the skinny products prefetch the next one's weights, if at all.
    pub fn l2_ahead_mode(&self) -> L2AheadMode {
        self.l2_ahead.mode()
    }

    /// Forgets the learned order (weights were replaced: their addresses may now hold others).
    pub(super) fn forget_l2_ahead(&self) {
        *self
            .l2_ahead
            .learned
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Learned::default();
    }

    /// Pushes the prefetch arguments of a skinny launch that reads `reads`: three (address, bytes)
    /// pairs and whether to prefetch at the warps' tail. All zero while the switch is off.
    pub(super) fn push_l2_ahead(&self, args: &mut PdlArgs, reads: &[(u64, u64)], order: Reads) {
        let mode = self.l2_ahead.mode();
        let mut spans = [(0, 0); 3];
        if mode != L2AheadMode::Off {
            let (ahead, first_seen) = self.l2_ahead.launch(reads, order);
            if first_seen {
                self.bump_graph_epoch();
            }
            spans = ahead;
        }
        for (at, bytes) in spans {
            args.addr(at).addr(bytes);
        }
        args.int(i32::from(mode == L2AheadMode::Tail));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_spans_take_reads_in_turn_up_to_the_cap() {
        let reads = [(0x1000, 4096), (0x9000, 4096), (0x20000, 4096)];
        let spans = leading_spans(&reads, Reads::InTurn, 6000);
        assert_eq!(spans, [(0x1000, 4096), (0x9000, 1904 / 16 * 16), (0, 0)]);
    }

    #[test]
    fn leading_spans_share_the_cap_between_reads_side_by_side() {
        let reads = [(0x1000, 1 << 20), (0x200000, 1 << 20)];
        let spans = leading_spans(&reads, Reads::SideBySide, 1 << 16);
        assert_eq!(spans, [(0x1000, 1 << 15), (0x200000, 1 << 15), (0, 0)]);
    }

    #[test]
    fn a_misaligned_span_is_not_prefetched() {
        let spans = leading_spans(&[(0x1008, 4096)], Reads::InTurn, 1 << 20);
        assert_eq!(spans, [(0, 0); 3]);
    }

    #[test]
    fn each_launch_learns_its_successor_and_prefetches_it_the_next_time() {
        let ahead = L2Ahead {
            mode: AtomicU8::new(L2AheadMode::Start.code()),
            cap_bytes: AtomicU64::new(1 << 20),
            learned: Mutex::new(Learned::default()),
        };
        let (a, b) = ([(0x1000u64, 256u64)], [(0x2000u64, 512u64)]);
        assert_eq!(ahead.launch(&a, Reads::InTurn), ([(0, 0); 3], false));
        // b follows a: a learns it (first seen), b knows nothing yet.
        assert_eq!(ahead.launch(&b, Reads::InTurn), ([(0, 0); 3], true));
        // a follows b: b learns a; a now prefetches b.
        let (spans, first) = ahead.launch(&a, Reads::InTurn);
        assert!(first);
        assert_eq!(spans, [(0x2000, 512), (0, 0), (0, 0)]);
        // The same order again teaches nothing new.
        assert_eq!(
            ahead.launch(&b, Reads::InTurn),
            ([(0x1000, 256), (0, 0), (0, 0)], false)
        );
    }
}
