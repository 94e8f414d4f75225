//! Slow clients cannot hold the server: a connection that does not finish sending its headers
//! within `--header-timeout-s` is closed, which frees its slot of `--max-connections` for the
//! clients behind it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use lexlip_tests::Server;

#[test]
fn connections_that_never_finish_their_headers_are_closed() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::with_flags(data.path(), "--header-timeout-s 1 --max-connections 4");
    let url = s.url("");
    let host = url.trim_start_matches("http://").to_string();
    // Every connection slot taken by a client that stops half-way through its headers.
    let mut slow: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut c = TcpStream::connect(&host).unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: lexlip\r\n")
                .unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c
        })
        .collect();

    // A client behind them is served once the header timeout has closed them.
    let start = Instant::now();
    let answer = ureq::get(&s.url("/healthz"))
        .timeout(Duration::from_secs(20))
        .call()
        .expect("served after the slow connections were closed");
    assert_eq!(answer.status(), 200);
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "waited {waited:?} for a connection slot"
    );

    // And the slow ones were closed by the server (end of stream, or a reset).
    for c in &mut slow {
        let mut rest = Vec::new();
        let closed = match c.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(e) => {
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut
            }
        };
        assert!(closed, "a slow connection is still open");
        assert!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "an unfinished request was answered"
        );
    }
    s.stop();
}

/// A client that sends its body slowly holds no request slot: with `--max-in-flight 1`, other
/// requests are served while it trickles, and it gets 408 after `--body-timeout-s`.
#[test]
fn slow_bodies_do_not_hold_request_slots() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::with_flags(data.path(), "--body-timeout-s 2 --max-in-flight 1");
    s.create("c", serde_json::json!({}));
    let url = s.url("");
    let host = url.trim_start_matches("http://").to_string();
    let mut slow = TcpStream::connect(&host).unwrap();
    slow.write_all(
        format!(
            "POST /v1/collections/c/search HTTP/1.1\r\nHost: {host}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"query\""
        )
        .as_bytes(),
    )
    .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The only request slot is free for others meanwhile.
    for _ in 0..3 {
        let (status, body) = s.call(
            "POST",
            "/v1/collections/c/search",
            Some(&serde_json::json!({"query": {"sparse": {"x": 1.0}}})),
        );
        assert_eq!(status, 200, "{body}");
    }
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-timeout-s"), "{answer}");
    s.stop();
}
