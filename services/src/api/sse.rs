//! Server-sent events: a stream of `event:`/`data:` frames from a channel, with the headers that keep
//! proxies from buffering it.

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

/// An SSE response that sends every frame received on `rx`, ending when the sender is dropped.
pub fn response(rx: mpsc::Receiver<Bytes>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(frames(rx))
}

fn frames(rx: mpsc::Receiver<Bytes>) -> impl Stream<Item = Result<Bytes, actix_web::Error>> {
    futures_util::stream::unfold(
        rx,
        |mut rx| async move { rx.recv().await.map(|b| (Ok(b), rx)) },
    )
}
