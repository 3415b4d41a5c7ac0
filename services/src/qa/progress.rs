//! Reading progress of a prompt: the engine reports each prefill chunk as tokens read of the total;
//! this turns those reports into what a user is shown ("reading 3,000 of 7,700 tokens · about 20 s"),
//! estimating the time left from the rate of this prompt's own chunks.

use std::time::Instant;

use super::types::ReadProgress;

/// The chunks of one prompt seen so far.
#[derive(Debug, Default)]
pub struct Reading {
    /// The first report: tokens read then (the prefix cache's and the first chunk's) and when.
    first: Option<(usize, Instant)>,
}

impl Reading {
    /// Notes that `read` of `total` tokens are read at `now`; the time left is estimated from the
    /// tokens read since the first report and the time they took.
    pub fn note(&mut self, read: usize, total: usize, now: Instant) -> ReadProgress {
        let (read0, t0) = *self.first.get_or_insert((read, now));
        let secs = now.duration_since(t0).as_secs_f64();
        let eta_ms = (read > read0 && secs > 0.0).then(|| {
            let rate = (read - read0) as f64 / secs;
            (total.saturating_sub(read) as f64 / rate * 1000.0).round() as u64
        });
        ReadProgress {
            read,
            total,
            eta_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_first_chunk_has_no_estimate_and_later_ones_extrapolate_their_rate() {
        let t0 = Instant::now();
        let mut reading = Reading::default();
        let first = reading.note(512, 4096, t0);
        assert_eq!((first.read, first.total, first.eta_ms), (512, 4096, None));
        // 1,024 more tokens in 2 s: 512 tok/s, 2,560 tokens left: 5 s.
        let later = reading.note(1536, 4096, t0 + Duration::from_secs(2));
        assert_eq!(later.eta_ms, Some(5000));
        let last = reading.note(4096, 4096, t0 + Duration::from_secs(7));
        assert_eq!(last.eta_ms, Some(0));
    }

    #[test]
    fn tokens_from_the_prefix_cache_do_not_inflate_the_rate() {
        // The first report already counts 3,000 cached tokens; the rate comes from later chunks only.
        let t0 = Instant::now();
        let mut reading = Reading::default();
        reading.note(3256, 5000, t0);
        let p = reading.note(3512, 5000, t0 + Duration::from_secs(1));
        assert_eq!(p.eta_ms, Some(5813)); // 1,488 tokens at 256 tok/s
    }
}
