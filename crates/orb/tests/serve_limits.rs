//! `orb serve`'s accept loop and request-head limits over real TCP: the router on a real
//! SQLite store (no cluster) served by `listener::serve`, as the binary serves it. Raw
//! HTTP/1.1 on sockets, so what hyper itself answers shows as a client sees it.

mod serve_support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::StatusCode;
use orb_cli::serve::listener::{self, Limits};
use serde_json::Value;
use serve_support::{Env, assert_problem};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// The limits docs/rest-api.md promises.
const DOCUMENTED_MAX_CONNECTIONS: usize = 1024;
const DOCUMENTED_MAX_URI_BYTES: usize = 8 * 1024;
const DOCUMENTED_MAX_HEADER_BYTES: usize = 32 * 1024;
const DOCUMENTED_MAX_HEADER_FIELDS: usize = 100;

/// How long any single read may take before the test calls the server stuck.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A returnable machine of the seeded store (terminated, so the return needs no provider).
const RETURN_BODY: &str = r#"{"machine_ids": ["orb-111111111111-0001"]}"#;

struct Served {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Served {
    async fn start(env: &Env, limits: Limits) -> Self {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(listener::serve(tcp, env.app.clone(), limits, stopping));
        Self { addr, stop, task }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr)
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.addr))
    }

    /// Stops the server; returns how many connections it still had open after its grace.
    async fn stop(self) -> usize {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the server stops within its shutdown grace")
            .unwrap()
    }
}

struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n\n{}",
            self.head,
            String::from_utf8_lossy(&self.body)
        )
    }
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not a JSON body ({e}): {}\n{}",
                self.head,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

async fn read_some(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 16 * 1024];
    let n = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut chunk))
        .await
        .map_err(|_| std::io::Error::other(format!("no answer within {READ_TIMEOUT:?}")))??;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Sends `raw` and reads one reply (head, then `Content-Length` bytes of body), leaving the
/// connection open for the next request.
async fn exchange(stream: &mut TcpStream, raw: &[u8]) -> std::io::Result<Reply> {
    stream.write_all(raw).await?;
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if read_some(stream, &mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "closed before a whole reply head; got {:?}",
                    String::from_utf8_lossy(&buf)
                ),
            ));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let mut reply = Reply {
        status,
        head,
        body: buf[head_end + 4..].to_vec(),
    };
    let length: usize = reply
        .header("content-length")
        .map(|v| v.parse().unwrap())
        .unwrap_or_else(|| panic!("only replies with a Content-Length are expected: {reply:?}"));
    while reply.body.len() < length {
        if read_some(stream, &mut reply.body).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(reply)
}

/// One request on a fresh connection.
async fn send(served: &Served, raw: &[u8]) -> Reply {
    let mut stream = served.connect().await;
    exchange(&mut stream, raw)
        .await
        .unwrap_or_else(|e| panic!("no reply to {}: {e}", preview(raw)))
}

fn preview(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    text.chars().take(120).collect()
}

fn get(target: &str, extra_headers: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: orb\r\n{extra_headers}\r\n").into_bytes()
}

fn post_json(target: &str, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {target} HTTP/1.1\r\nHost: orb\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `path?pad=xxx…`, exactly `len` bytes long.
fn padded_target(path: &str, len: usize) -> String {
    let target = format!("{path}?pad=");
    let pad = len.checked_sub(target.len()).expect("len covers the path");
    format!("{target}{}", "x".repeat(pad))
}

/// `POST /api/v1/machines/return` with a URI of exactly `len` bytes that the route still
/// accepts: its query takes only `wait` and `timeout`, so the padding is leading zeros of
/// `timeout=5` (a gone machine's return finishes at once, so the wait is not felt).
fn padded_return_target(len: usize) -> String {
    let head = "/api/v1/machines/return?wait=true&timeout=";
    let zeros = len
        .checked_sub(head.len() + 1)
        .expect("len covers the path");
    format!("{head}{}5", "0".repeat(zeros))
}

/// A problem document with this status, type and a detail containing `needle`, sent as
/// `application/problem+json`.
fn assert_problem_reply(reply: &Reply, status: u16, slug: &str, needle: &str) {
    assert_eq!(
        reply.header("content-type"),
        Some("application/problem+json"),
        "{reply:?}"
    );
    let code = StatusCode::from_u16(reply.status).unwrap();
    assert_problem(&(code, reply.json()), status, slug, needle);
}

#[tokio::test]
async fn a_uri_over_8_kib_is_a_414_problem_document_and_changes_nothing() {
    let env = Env::new().await;
    env.seed().await;
    let served = Served::start(&env, Limits::default()).await;
    let before = env.request_count().await;
    // Just over the limit, and just under hyper's own fixed URI cap (64 KiB): both reach the
    // router and get its document.
    for len in [DOCUMENTED_MAX_URI_BYTES + 1, 60 * 1024] {
        let target = padded_return_target(len);
        let reply = send(&served, &post_json(&target, "", RETURN_BODY)).await;
        assert_problem_reply(
            &reply,
            414,
            "uri-too-long",
            &format!("the request URI is {len} bytes, more than the 8192 allowed"),
        );
        assert_eq!(
            env.request_count().await,
            before,
            "a refused return stores nothing"
        );
    }
    // The same call at the limit is served and stores its return: the refusal was the length.
    let target = padded_return_target(DOCUMENTED_MAX_URI_BYTES);
    assert_eq!(target.len(), DOCUMENTED_MAX_URI_BYTES);
    let reply = send(&served, &post_json(&target, "", RETURN_BODY)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.json()["request"]["status"], "complete");
    assert_eq!(env.request_count().await, before + 1);
    // Past hyper's fixed cap hyper answers itself (no body can be had there); the server
    // keeps serving.
    let mut stream = served.connect().await;
    let reply = exchange(&mut stream, &get(&padded_target("/livez", 70 * 1024), ""))
        .await
        .unwrap();
    assert_eq!(reply.status, 414, "{reply:?}");
    assert_eq!(send(&served, &get("/livez", "")).await.status, 200);
    assert_eq!(served.stop().await, 0);
}

#[tokio::test]
async fn header_fields_over_32_kib_or_100_are_a_431_problem_document_and_change_nothing() {
    let env = Env::new().await;
    env.seed().await;
    let served = Served::start(&env, Limits::default()).await;
    let before = env.request_count().await;
    let one_big = format!("X-Padding: {}\r\n", "y".repeat(DOCUMENTED_MAX_HEADER_BYTES));
    let reply = send(
        &served,
        &post_json("/api/v1/machines/return", &one_big, RETURN_BODY),
    )
    .await;
    assert_problem_reply(
        &reply,
        431,
        "request-header-fields-too-large",
        "(the largest is x-padding, 32781 bytes), more than the 32768 allowed",
    );
    // Host, Content-Type, Content-Length and 98 more: 101 fields.
    let many: String = (0..DOCUMENTED_MAX_HEADER_FIELDS - 2)
        .map(|i| format!("X-Field-{i}: {i}\r\n"))
        .collect();
    let reply = send(
        &served,
        &post_json("/api/v1/machines/return", &many, RETURN_BODY),
    )
    .await;
    assert_problem_reply(
        &reply,
        431,
        "request-header-fields-too-large",
        "the request has 101 header fields, more than the 100 allowed",
    );
    assert_eq!(
        env.request_count().await,
        before,
        "a refused return stores nothing"
    );
    // 100 fields of nearly 32 KiB in all are served, and the return is stored.
    let at_limit: String = (0..DOCUMENTED_MAX_HEADER_FIELDS - 3)
        .map(|i| format!("X-Field-{i:02}: {}\r\n", "z".repeat(300)))
        .collect();
    let reply = send(
        &served,
        &post_json("/api/v1/machines/return", &at_limit, RETURN_BODY),
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(env.request_count().await, before + 1);
    // Past hyper's backstop of 400 fields hyper answers 431 itself, without a body.
    let too_many: String = (0..500).map(|i| format!("X-F-{i}: {i}\r\n")).collect();
    let mut stream = served.connect().await;
    let reply = exchange(&mut stream, &get("/livez", &too_many))
        .await
        .unwrap();
    assert_eq!(reply.status, 431, "{reply:?}");
    assert!(reply.body.is_empty(), "hyper's own reply: {reply:?}");
    // A 200 KiB head is past hyper's 128 KiB backstop (under hyper's default 400 KiB it would
    // reach the router): hyper refuses it, and as the server closes with the rest of the head
    // unread, the client may see a reset instead of the 431.
    let huge = format!("X-Padding: {}\r\n", "y".repeat(200 * 1024));
    let mut stream = served.connect().await;
    match exchange(&mut stream, &get("/livez", &huge)).await {
        Ok(reply) => {
            assert_eq!(reply.status, 431, "{reply:?}");
            assert!(reply.body.is_empty(), "hyper's own reply: {reply:?}");
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            ),
            "refused by closing, not {e}"
        ),
    }
    assert_eq!(send(&served, &get("/livez", "")).await.status, 200);
    assert_eq!(served.stop().await, 0);
}

/// Raises this process's soft limit on open files to `needed` if it is lower: both ends of
/// every connection of the cap test live in this process.
fn ensure_open_files(needed: u64) {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_none_or(|soft| soft >= needed) {
        return;
    }
    if let Some(hard) = limit.maximum.filter(|hard| *hard < needed) {
        panic!(
            "this test holds {needed} sockets open, but the hard limit on open files is {hard}; \
             raise it (ulimit -Hn {needed} as root, or LimitNOFILE= in a systemd unit)"
        );
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(needed),
            maximum: limit.maximum,
        },
    )
    .unwrap_or_else(|e| panic!("raising the soft limit on open files to {needed}: {e}"));
}

const LIVEZ: &[u8] = b"GET /livez HTTP/1.1\r\nHost: orb\r\n\r\n";

/// Whether a new connection is closed by the server without an answer, as the accept loop
/// does over the cap (`Ok(())`), or served (`Err` with what came back).
async fn closed_at_accept(served: &Served) -> Result<(), String> {
    let mut stream = served.connect().await;
    // The server may already have closed: a failed write is the same refusal.
    let _ = stream.write_all(LIVEZ).await;
    let mut buf = Vec::new();
    match read_some(&mut stream, &mut buf).await {
        Ok(0) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(()),
        Ok(_) => Err(format!(
            "it was answered: {:?}",
            String::from_utf8_lossy(&buf)
        )),
        Err(e) => Err(format!("neither answered nor closed: {e}")),
    }
}

/// A new connection that is served (a slot is free), trying until `within` has passed: a
/// slot frees once the server has noticed a client's close.
async fn served_connection(served: &Served, within: Duration) -> TcpStream {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut stream = served.connect().await;
        match exchange(&mut stream, LIVEZ).await {
            Ok(reply) if reply.status == 200 => return stream,
            Ok(reply) => panic!("/livez should be 200: {reply:?}"),
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("no connection was served within {within:?} of freeing slots: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_closes_the_next_connection_at_accept_until_one_ends() {
    // The default cap; a long header timeout only so that idle connections outlive the test
    // on a slow machine (the default 15 s would close them, freeing slots by itself).
    let limits = Limits {
        header_read_timeout: Duration::from_secs(300),
        ..Limits::default()
    };
    let cap = limits.max_connections;
    assert_eq!(cap, DOCUMENTED_MAX_CONNECTIONS);
    ensure_open_files(2 * cap as u64 + 512);
    let env = Env::new().await;
    let served = Served::start(&env, limits).await;

    // Each connection is answered once, so it holds a slot, then stays open and idle.
    let mut held = Vec::with_capacity(cap);
    for i in 0..cap {
        let mut stream = served.connect().await;
        let reply = exchange(&mut stream, LIVEZ)
            .await
            .unwrap_or_else(|e| panic!("connection {} of {cap} should be served: {e}", i + 1));
        assert_eq!(reply.status, 200, "{reply:?}");
        held.push(stream);
    }
    if let Err(e) = closed_at_accept(&served).await {
        panic!("connection {} should be closed at accept: {e}", cap + 1);
    }
    // The connections being served are untouched by the refusal.
    let reply = exchange(&mut held[0], LIVEZ).await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = exchange(&mut held[cap - 1], LIVEZ).await.unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");

    // Ten clients leave: ten new connections are served, and the cap is full again.
    const FREED: usize = 10;
    held.drain(..FREED);
    for _ in 0..FREED {
        held.push(served_connection(&served, Duration::from_secs(10)).await);
    }
    if let Err(e) = closed_at_accept(&served).await {
        panic!("with the freed slots taken again, the next connection should be closed: {e}");
    }

    drop(held);
    assert_eq!(served.stop().await, 0, "idle connections end at shutdown");
}
