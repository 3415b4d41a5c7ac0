//! Server-sent events: a stream of `event:`/`data:` frames from a channel, with the headers that keep
//! proxies from buffering it, and comment frames while it is idle so that a closed connection is
//! noticed (and the answer behind it stopped) within about half a second.

use std::time::Duration;

use actix_web::HttpResponse;
use bytes::Bytes;
use futures_util::Stream;
use tokio::sync::mpsc;

/// One frame: `event: NAME` (when given) and `data: JSON`.
pub fn frame(event: Option<&str>, data: &str) -> Bytes {
    let mut s = String::with_capacity(data.len() + 32);
    if let Some(name) = event {
        s.push_str("event: ");
        s.push_str(name);
        s.push('\n');
    }
    for line in data.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

/// A comment frame (`: text`), which clients skip.
pub fn comment(text: &str) -> Bytes {
    let mut s = String::with_capacity(text.len() + 4);
    for line in text.split('\n') {
        s.push_str(": ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

/// The next event of `events` to frame into `out`, or `None` when the events end or `out`'s receiver
/// (the response body) is dropped: the caller went away. Waiting on both notices a closed connection
/// at once, not at the next event.
pub async fn next_event<T>(events: &mut mpsc::Receiver<T>, out: &mpsc::Sender<Bytes>) -> Option<T> {
    tokio::select! {
        ev = events.recv() => ev,
        () = out.closed() => None,
    }
}

/// How often an idle stream sends a comment frame. actix notices a closed connection only when a
/// write to it fails, the second write after the close; with a frame every quarter second a stop is
/// seen within about half a second even while the model reads a long prompt.
const HEARTBEAT: Duration = Duration::from_millis(250);

/// An SSE response that sends every frame received on `rx`, ending when the sender is dropped, with a
/// comment frame whenever none came for [`HEARTBEAT`].
pub fn response(rx: mpsc::Receiver<Bytes>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(frames(rx))
}

fn frames(rx: mpsc::Receiver<Bytes>) -> impl Stream<Item = Result<Bytes, actix_web::Error>> {
    let mut beat = tokio::time::interval(HEARTBEAT);
    beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    futures_util::stream::unfold((rx, beat), |(mut rx, mut beat)| async move {
        tokio::select! {
            frame = rx.recv() => {
                beat.reset();
                frame.map(|b| (Ok(b), (rx, beat)))
            }
            _ = beat.tick() => Some((Ok(comment("")), (rx, beat))),
        }
    })
}
