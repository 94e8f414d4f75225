//! The soak, short (`scripts/soak.py` runs it for an hour): clients add and delete as many
//! documents as they add, search and read back for a minute; the data size stays exactly
//! constant, no request gets a 5xx, and the server's heap in the second half of the run stays
//! within a margin of what it reached in the first (a per-request leak of even a few KB would
//! pass it; the hour-long script measures the slope).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lexlip_tests::Server;
use serde_json::{Value, json};

const DOCS: usize = 4_000;
const BATCH: usize = 50;
const CLIENTS: usize = 4;
const RUN: Duration = Duration::from_secs(60);
const MARGIN: u64 = 48 << 20;

fn doc(id: &str, n: usize) -> Value {
    let terms: serde_json::Map<String, Value> = (0..40)
        .map(|j| {
            (
                format!("t{}", (n * 7 + j * 13) % 3_000),
                json!(0.1 + (j % 9) as f64 * 0.2),
            )
        })
        .collect();
    json!({"id": id, "text": format!("document {n}"), "metadata": {"topic": n % 50}, "vector": terms})
}

fn documents(s: &Server) -> u64 {
    s.call("GET", "/v1/collections/c", None).1["documents"]
        .as_u64()
        .unwrap()
}

#[test]
fn constant_data_size_under_mixed_load_keeps_memory_flat_and_answers_without_5xx() {
    let data = tempfile::tempdir().unwrap();
    let s = Arc::new(Server::start(
        data.path(),
        &["--max-in-flight".into(), "16".into()],
    ));
    assert_eq!(s.call("PUT", "/v1/collections/c", Some(&json!({}))).0, 201);
    let queue = Arc::new(Mutex::new(Vec::new()));
    for start in (0..DOCS).step_by(500) {
        let ids: Vec<String> = (start..start + 500).map(|n| format!("fill-{n}")).collect();
        s.add(
            "c",
            ids.iter()
                .enumerate()
                .map(|(i, id)| doc(id, start + i))
                .collect(),
        );
        queue.lock().unwrap().extend(ids);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (requests, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let workers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let (s, queue, stop) = (s.clone(), queue.clone(), stop.clone());
            let (requests, errors) = (requests.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut round = 0;
                let count = |status: u16| {
                    requests.fetch_add(1, Ordering::Relaxed);
                    if status >= 500 {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                };
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    let ids: Vec<String> = (0..BATCH).map(|i| format!("w{w}-{round}-{i}")).collect();
                    let docs: Vec<Value> = ids.iter().enumerate().map(|(i, id)| doc(id, round * 31 + i)).collect();
                    let (status, body) = s.call("POST", "/v1/collections/c/documents", Some(&json!({"documents": docs})));
                    count(status);
                    assert_eq!(status, 200, "{body}");
                    let old: Vec<String> = {
                        let mut q = queue.lock().unwrap();
                        q.extend(ids);
                        q.drain(..BATCH).collect()
                    };
                    for id in old {
                        let (status, body) = s.call("DELETE", &format!("/v1/collections/c/documents/{id}"), None);
                        count(status);
                        assert_eq!(status, 200, "{id}: {body}");
                    }
                    let query = json!({"query": {"sparse": {format!("t{}", round % 3_000): 1.0, "t13": 0.5}}, "k": 10, "exact": round % 2 == 0, "explain": true, "filter": {"metadata": {"topic": round % 50}}});
                    let (status, body) = s.call("POST", "/v1/collections/c/search", Some(&query));
                    count(status);
                    assert_eq!(status, 200, "{body}");
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < RUN {
        std::thread::sleep(Duration::from_secs(5));
        samples.push(s.heap_rss());
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(
        documents(&s),
        DOCS as u64,
        "adds and deletes balance exactly"
    );
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    assert!(requests.load(Ordering::Relaxed) > 500, "the load ran");
    eprintln!(
        "heap MB every 5 s: {:?}",
        samples.iter().map(|b| b >> 20).collect::<Vec<_>>()
    );
    let (first, second) = samples.split_at(samples.len() / 2);
    let (early, late) = (first.iter().max().unwrap(), second.iter().max().unwrap());
    assert!(
        *late <= early + MARGIN,
        "heap grew from {} MB to {} MB at constant data size ({samples:?})",
        early >> 20,
        late >> 20
    );
}
