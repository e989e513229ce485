//! A minimal keep-alive HTTP/1.1 client on one connection, the lower bound
//! of what a client costs (like `wrk`): the request head is built once per
//! connection, each request is one write, and an answer is read by its
//! `Content-Length` (answers without one are an error). The load generator
//! shares the machine's cores with the server, so the less it spends, the
//! more the figures show the server.

use std::io::{Error, ErrorKind};
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One connection sending the same request head again and again.
pub struct RawConn {
    stream: TcpStream,
    /// The request line and headers; for a GET the blank line too.
    head: Vec<u8>,
    /// Bytes read and not yet handed out.
    buf: Vec<u8>,
    /// What one read may take at most.
    scratch: Vec<u8>,
}

impl RawConn {
    /// A connection for `POST path` requests with `headers`, in order;
    /// each [`RawConn::send`] adds the body and its length. Reads take up
    /// to `read_chunk` bytes at once.
    pub async fn post(
        addr: SocketAddr,
        path: &str,
        headers: &[(&str, &str)],
        read_chunk: usize,
    ) -> std::io::Result<RawConn> {
        let mut head = format!("POST {path} HTTP/1.1\r\nhost: {addr}\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        RawConn::open(addr, head, read_chunk).await
    }

    /// A connection for `GET path` requests, sent with `send(None)`.
    pub async fn get(addr: SocketAddr, path: &str, read_chunk: usize) -> std::io::Result<RawConn> {
        RawConn::open(
            addr,
            format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n\r\n"),
            read_chunk,
        )
        .await
    }

    async fn open(addr: SocketAddr, head: String, read_chunk: usize) -> std::io::Result<RawConn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            head: head.into_bytes(),
            buf: Vec::with_capacity(read_chunk),
            scratch: vec![0; read_chunk],
        })
    }

    /// Sends one request (`Some(body)` on a POST connection, `None` on a
    /// GET one) and returns the answer's status and body.
    pub async fn send(&mut self, body: Option<&[u8]>) -> std::io::Result<(u16, Vec<u8>)> {
        self.write_request(body).await?;
        let header_end = loop {
            if let Some(p) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p;
            }
            self.fill().await?;
        };
        let (status, len) = parse_head(self.buf.get(..header_end).unwrap_or_default())?;
        let total = header_end + 4 + len;
        while self.buf.len() < total {
            self.fill().await?;
        }
        let body = self
            .buf
            .get(header_end + 4..total)
            .unwrap_or_default()
            .to_vec();
        self.buf.drain(..total);
        Ok((status, body))
    }

    /// Writes the request in one write, so it leaves in one segment.
    async fn write_request(&mut self, body: Option<&[u8]>) -> std::io::Result<()> {
        match body {
            Some(body) => {
                let mut req = Vec::with_capacity(self.head.len() + body.len() + 32);
                req.extend_from_slice(&self.head);
                req.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                req.extend_from_slice(body);
                self.stream.write_all(&req).await
            }
            None => self.stream.write_all(&self.head).await,
        }
    }

    /// Reads what the server sent next.
    async fn fill(&mut self) -> std::io::Result<()> {
        let n = self.stream.read(&mut self.scratch).await?;
        if n == 0 {
            return Err(Error::new(ErrorKind::UnexpectedEof, "connection closed"));
        }
        self.buf
            .extend_from_slice(self.scratch.get(..n).unwrap_or_default());
        Ok(())
    }
}

/// The status and `Content-Length` of an answer's head.
fn parse_head(head: &[u8]) -> std::io::Result<(u16, usize)> {
    let bad = |m: &str| Error::new(ErrorKind::InvalidData, m.to_string());
    let head = std::str::from_utf8(head).map_err(|_| bad("non-UTF-8 response head"))?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let len: usize = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .ok_or_else(|| bad("response without content-length"))?;
    Ok((status, len))
}
