//! A write that runs into the request timeout either answers 503 and writes nothing — not even
//! later, when its blocking work would have reached the commit — or is already committing and
//! answers 200 with everything written. Timeouts from 1 ms to 400 ms land before, during and
//! after the commit of a 1,000-document add.

use std::time::Duration;

use axum::http::StatusCode;
use lexlip_server::http::state::Limits;
use serde_json::{Value, json};

mod in_process;

use in_process::{app, call, limits};

fn batch(round: usize) -> Value {
    let docs: Vec<Value> = (0..1000)
        .map(|i| {
            json!({"id": format!("r{round}-{i}"), "text": "x".repeat(200),
                   "vector": {format!("w{}", i % 97): 0.5, "all": 0.1}})
        })
        .collect();
    json!({"documents": docs})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_write_is_never_committed_later() {
    let data = tempfile::tempdir().unwrap();
    {
        let (app, _) = app(data.path(), None, limits());
        let (st, body) = call(&app, "PUT", "/v1/collections/c", None).await;
        assert_eq!(st, StatusCode::CREATED, "{body}");
    }
    let (mut answered, mut refused) = (0, 0);
    let mut expected = 0u64;
    for (round, ms) in [1u64, 5, 20, 50, 100, 200, 400, 10, 30, 75]
        .into_iter()
        .enumerate()
    {
        let limits = Limits {
            request_timeout: Duration::from_millis(ms),
            max_batch_docs: 1000,
            ..limits()
        };
        let (st, body) = {
            let (app, _) = app(data.path(), None, limits);
            let answer = call(
                &app,
                "POST",
                "/v1/collections/c/documents",
                Some(batch(round)),
            )
            .await;
            // Whatever the blocking work still does after the answer, give it time to finish.
            tokio::time::sleep(Duration::from_millis(500)).await;
            answer
        };
        // Counted through a server without the tiny timeout, which a loaded machine can make
        // a read miss too.
        let (check, _) = app(data.path(), None, in_process::limits());
        let (_, info) = call(&check, "GET", "/v1/collections/c", None).await;
        match st {
            StatusCode::OK => {
                answered += 1;
                expected += 1000;
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                refused += 1;
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains("nothing was written"), "{body}");
            }
            other => panic!("timeout {ms} ms: {other} {body}"),
        }
        assert_eq!(
            info["documents"], expected,
            "timeout {ms} ms answered {st}, yet the collection holds {info}"
        );
    }
    eprintln!("{answered} writes answered 200, {refused} answered 503 and wrote nothing");
}
