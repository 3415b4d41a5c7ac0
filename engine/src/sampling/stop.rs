//! Stop strings on a stream of decoded text.
//!
//! Text arrives in pieces; a stop string can straddle pieces. [`StopStringMatcher`] emits only text that can
//! no longer become part of a stop string and holds back the longest tail that is still a prefix of one.
//! When a stop string completes, the text before it is emitted and the stream is over.

/// The result of feeding one piece of text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopScan {
    /// Text that is safe to show now.
    pub emit: String,
    /// Whether a stop string was found (nothing more should be generated).
    pub stopped: bool,
}

/// Watches decoded text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopStringMatcher {
    stops: Vec<String>,
    pending: String,
    stopped: bool,
}

impl StopStringMatcher {
    /// A matcher for `stops` (empty strings are ignored).
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
            stopped: false,
        }
    }

    /// Feeds the next piece of decoded text.
    pub fn push(&mut self, text: &str) -> StopScan {
        if self.stopped {
            return StopScan {
                emit: String::new(),
                stopped: true,
            };
        }
        self.pending.push_str(text);
        if let Some(at) = first_stop(&self.pending, &self.stops) {
            self.pending.truncate(at);
            self.stopped = true;
            return StopScan {
                emit: std::mem::take(&mut self.pending),
                stopped: true,
            };
        }
        let safe = safe_prefix_len(&self.pending, &self.stops);
        let emit = self.pending[..safe].to_owned();
        self.pending.drain(..safe);
        StopScan { emit, stopped: false }
    }

    /// Ends the stream (e.g. on an end-of-sequence token): returns the held-back text.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// Byte offset of the earliest occurrence of any stop string in `text`.
fn first_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|s| text.find(s.as_str())).min()
}

/// How many leading bytes of `text` cannot be part of a stop string that is still forming: `text`'s
/// length minus its longest suffix that is a proper prefix of some stop string. Always a char boundary.
pub fn safe_prefix_len(text: &str, stops: &[String]) -> usize {
    let held = stops
        .iter()
        .flat_map(|stop| {
            stop.char_indices()
                .skip(1)
                .map(|(i, _)| &stop[..i])
                .filter(|prefix| text.ends_with(prefix))
                .map(str::len)
        })
        .max()
        .unwrap_or(0);
    text.len() - held
}
