//! One event, one line, in the human log format.
//!
//! Log fields carry text from outside: an upstream's tool names and error
//! messages, a stdio child's stderr, an agent card's fields. A newline in
//! such text would start what reads as a log line of its own (a forged
//! `INFO … approved`), and a carriage return can hide the start of a line
//! on a terminal. The human format writes each event through
//! [`OneLine`], which escapes every line break and control character
//! inside the event (`\n`, `\r`, `\x01`, `\u{2028}`), keeping only the
//! event's final newline, tabs, and the escape character of the
//! formatter's own colours (tracing already escapes that one inside field
//! values). The JSON format needs none of this: JSON strings escape
//! control characters.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

/// Standard error, one line per event.
#[derive(Debug, Clone, Copy, Default)]
pub struct OneLine;

impl<'a> MakeWriter<'a> for OneLine {
    type Writer = Escaping<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        Escaping(io::stderr())
    }
}

/// A writer that escapes line breaks and control characters inside each
/// write (the formatter writes each event whole, newline last).
#[derive(Debug)]
pub struct Escaping<W>(pub W);

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (body, end) = match buf.strip_suffix(b"\n") {
            Some(body) => (body, true),
            None => (buf, false),
        };
        let mut line = escape(body);
        if end {
            line.push(b'\n');
        }
        self.0.write_all(&line)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `bytes` with line breaks and control characters (but tab and escape)
/// written as escapes.
pub fn escape(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // U+2028 and U+2029, which some viewers break lines at.
        if b == 0xe2
            && bytes.get(i + 1) == Some(&0x80)
            && let Some(&last @ (0xa8 | 0xa9)) = bytes.get(i + 2)
        {
            let code = if last == 0xa8 { "2028" } else { "2029" };
            out.extend_from_slice(format!("\\u{{{code}}}").as_bytes());
            i += 3;
            continue;
        }
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' | 0x1b => out.push(b),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_stays_one_line_whatever_its_fields_hold() {
        let mut w = Escaping(Vec::new());
        let event = "WARN upstream failed error=no\n2026-01-01T00:00:00Z  INFO approved\r\u{1}\u{2028}\tok\n";
        w.write_all(event.as_bytes())
            .unwrap_or_else(|_| unreachable!());
        let text = String::from_utf8(w.0).unwrap_or_else(|_| unreachable!());
        assert_eq!(
            text,
            "WARN upstream failed error=no\\n2026-01-01T00:00:00Z  INFO approved\\r\\x01\\u{2028}\tok\n"
        );
        assert_eq!(text.lines().count(), 1);
    }
}
