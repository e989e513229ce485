//! Reading an SSE answer's `message` events in tests.

use serde_json::Value;

/// The `message` events of an SSE answer, read chunk by chunk.
pub struct Events {
    pub resp: reqwest::Response,
    pub buf: String,
}

impl Events {
    /// The next `message` event's JSON (keep-alive comments skipped);
    /// `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if block.lines().any(|l| l.trim() == "event: message") {
                    return Some(serde_json::from_str(&data.join("\n")).unwrap());
                }
                continue;
            }
            let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), self.resp.chunk())
                .await
                .expect("the stream stalled")
                .ok()??;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}
