//! `lexlip serve` as a real process on a free loopback port, and requests to it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A running `lexlip serve`; killed when dropped.
pub struct Server {
    child: Child,
    base: String,
}

impl Server {
    pub fn start(data: &Path, extra: &[String]) -> Server {
        let mut args = vec![
            "serve".to_string(),
            "--data".into(),
            data.display().to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
        ];
        args.extend_from_slice(extra);
        Server::spawn(&args)
    }

    /// `lexlip serve` over `data` with `flags` written as one line of words
    /// (`"--max-connections 4"`): a line, not a word per line.
    pub fn with_flags(data: &Path, flags: &str) -> Server {
        let flags: Vec<String> = flags.split_whitespace().map(String::from).collect();
        Server::start(data, &flags)
    }

    /// `lexlip serve --model MODEL` over `data`: how most suites serve a model.
    pub fn with_model(data: &Path, model: &Path) -> Server {
        Server::start(data, &["--model".into(), model.display().to_string()])
    }

    /// Runs `lexlip ARGS` (a command that ends up serving, on `--addr 127.0.0.1:0`) and waits
    /// for its "lexlip listening on" line; what it prints on stdout before is skipped.
    pub fn spawn(args: &[String]) -> Server {
        let mut child = Command::new(crate::lexlip_bin())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting lexlip");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let base = loop {
            let mut line = String::new();
            let n = stdout.read_line(&mut line).unwrap();
            assert!(n > 0, "lexlip {args:?} ended before it listened");
            if let Some(url) = line.trim().strip_prefix("lexlip listening on ") {
                break url.to_string();
            }
        };
        Server { child, base }
    }

    /// The server's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        self.status_kb("VmHWM") * 1024
    }

    /// The server's anonymous resident memory now (`RssAnon`: heap and stacks), in bytes.
    pub fn heap_rss(&self) -> u64 {
        self.status_kb("RssAnon") * 1024
    }

    /// A `kB` figure of the server's `/proc/PID/status`.
    fn status_kb(&self, key: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{key} in /proc status"))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Creates the collection `name` with `settings`, which must answer 201; returns the answer.
    pub fn create(&self, name: &str, settings: Value) -> Value {
        let (st, body) = self.call("PUT", &format!("/v1/collections/{name}"), Some(&settings));
        assert_eq!(st, 201, "creating {name}: {body}");
        body
    }

    /// Adds `docs` to the collection `name`, which must answer 200; returns the answer.
    pub fn add(&self, name: &str, docs: Vec<Value>) -> Value {
        let path = format!("/v1/collections/{name}/documents");
        let (st, body) = self.call(
            "POST",
            &path,
            Some(&serde_json::json!({ "documents": docs })),
        );
        assert_eq!(st, 200, "adding to {name}: {body}");
        body
    }

    /// Sends a request; returns (status, JSON body).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.call_with(method, path, body, &[])
    }

    pub fn call_with(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        self.request(method, path, body, headers, Duration::from_secs(60))
    }

    /// [`Server::call`] for a request the server may take longer than a minute over (one
    /// started with a longer `--request-timeout-s`, on a slow machine).
    pub fn call_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> (u16, Value) {
        self.request(method, path, body, &[], timeout)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
        timeout: Duration,
    ) -> (u16, Value) {
        let mut req = ureq::request(method, &self.url(path)).timeout(timeout);
        for (k, v) in headers {
            req = req.set(k, v);
        }
        let result = match body {
            Some(b) => req.send_json(b.clone()),
            None => req.call(),
        };
        response(result)
    }

    pub fn raw(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, Value) {
        let req = ureq::request(method, &self.url(path))
            .timeout(Duration::from_secs(60))
            .set("Content-Type", content_type);
        response(req.send_bytes(body))
    }

    /// Sends a body the server refuses before reading it all (over `--max-body-mb`) and returns
    /// the status it answers. A plain socket, because the server may answer and close while the
    /// body is still going out: an HTTP client then reports the broken pipe, not the answer.
    pub fn status_of_oversized(&self, method: &str, path: &str, body: &[u8]) -> u16 {
        use std::io::{Read, Write};
        let host = self.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(host).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        // Either write may fail once the server has answered and closed: the answer is read next.
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        let status = text.split_whitespace().nth(1).unwrap_or_default();
        status
            .parse()
            .unwrap_or_else(|_| panic!("no HTTP status in {text:?}"))
    }

    /// Kills the process with SIGKILL (no shutdown, no flush) and waits for it.
    pub fn kill(mut self) {
        self.child.kill().expect("sending SIGKILL");
        let _ = self.child.wait();
    }

    /// Graceful stop (SIGTERM): must exit 0.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(ok.success());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "lexlip serve exited with {status}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn response(result: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    let r = match result {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    };
    let status = r.status();
    let text = r.into_string().unwrap();
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, value)
}

/// The hits of a search answer (`{"hits": [...]}`), from the server or `lexlip search --json`:
/// what most checks of an answer walk.
pub fn hits(answer: &Value) -> &[Value] {
    answer["hits"]
        .as_array()
        .unwrap_or_else(|| panic!("a search answer has hits: {answer}"))
}

/// The ids of a search answer's hits, in rank order.
pub fn hit_ids(answer: &Value) -> Vec<String> {
    hits(answer)
        .iter()
        .map(|h| h["id"].as_str().expect("a hit has an id").to_string())
        .collect()
}

/// One number of every hit of a search answer (`score`, `match_strength`), in rank order.
pub fn hit_numbers(answer: &Value, key: &str) -> Vec<f64> {
    hits(answer)
        .iter()
        .map(|h| {
            h[key]
                .as_f64()
                .unwrap_or_else(|| panic!("a hit has a {key}: {h}"))
        })
        .collect()
}

/// `(id, score)` of every hit of a search answer (`{"hits": [{"id", "score", …}]}`), from the
/// server or `lexlip search --json`.
pub fn hit_scores(answer: &Value) -> Vec<(String, f64)> {
    hits(answer)
        .iter()
        .map(|h| {
            (
                h["id"].as_str().expect("a hit has an id").to_string(),
                h["score"].as_f64().expect("a hit has a score"),
            )
        })
        .collect()
}
