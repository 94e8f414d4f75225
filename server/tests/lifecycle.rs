//! Collection lifecycle under concurrency and damage: a write that waited through a delete (and
//! a re-create of the same name) writes nothing; delete waits for a running write; a collection
//! that cannot be opened does not stop the server from starting, is reported, and can be removed.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::IntoResponse;
use lexlip_index::CollectionSettings;
use lexlip_server::http::batcher::BatchConfig;
use lexlip_server::http::encoders::{EncoderService, ModelPaths};
use lexlip_server::http::metrics::Metrics;
use lexlip_server::http::state::AppState;
use serde_json::json;

mod in_process;

use in_process::{app, call, limits};

fn state(data: &std::path::Path) -> Arc<AppState> {
    let metrics = Metrics::new();
    let batch = BatchConfig {
        max_batch: 8,
        max_wait: Duration::from_millis(1),
        queue: 16,
    };
    let encoders = EncoderService::load(&ModelPaths::default(), batch, &metrics).unwrap();
    Arc::new(AppState::open(data, encoders, metrics, limits()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_waited_through_a_delete_and_recreate_writes_nothing() {
    let data = tempfile::tempdir().unwrap();
    let state = state(data.path());
    assert!(state.create("c", CollectionSettings::default()).unwrap());
    // A write request has looked the collection up and holds its write lock.
    let stale = state.get("c").unwrap();
    let running = stale.lock_for_write("c").await.unwrap();
    let st = state.clone();
    let deleting = tokio::task::spawn_blocking(move || st.delete("c"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !deleting.is_finished(),
        "delete must wait for the running write"
    );
    drop(running);
    deleting.await.unwrap().unwrap();
    // The name is free again, and a new collection takes it.
    assert!(state.create("c", CollectionSettings::default()).unwrap());
    // A second request had looked up the old collection before the delete: it must not write.
    let refused = stale.lock_for_write("c").await.expect_err("refused");
    assert_eq!(refused.into_response().status(), StatusCode::NOT_FOUND);
    // The new collection is untouched and writable.
    let fresh = state.get("c").unwrap();
    assert!(!Arc::ptr_eq(&fresh, &stale));
    assert_eq!(fresh.collection.snapshot().unwrap().num_docs(), 0);
    assert!(fresh.lock_for_write("c").await.is_ok());
}

#[tokio::test]
async fn a_collection_that_cannot_be_opened_is_reported_not_fatal() {
    let data = tempfile::tempdir().unwrap();
    {
        let (app, _) = app(data.path(), None, limits());
        for name in ["good", "bad"] {
            let (st, body) = call(&app, "PUT", &format!("/v1/collections/{name}"), None).await;
            assert_eq!(st, StatusCode::CREATED, "{body}");
        }
        let doc = json!({"documents": [{"id": "a", "text": "a dog", "vector": {"dog": 1.0}}]});
        let (st, body) = call(&app, "POST", "/v1/collections/good/documents", Some(doc)).await;
        assert_eq!(st, StatusCode::OK, "{body}");
    }
    // Damage: the tantivy index of `bad` is gone, its manifest is still there.
    std::fs::remove_dir_all(data.path().join("collections/bad/index")).unwrap();

    let (app, _) = app(data.path(), None, limits());
    let (st, ready) = call(&app, "GET", "/readyz", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(ready["collections"], json!(["good"]), "{ready}");
    assert!(ready["broken_collections"]["bad"].is_string(), "{ready}");
    let query = json!({"query": {"sparse": {"dog": 1.0}}, "k": 3});
    let (st, found) = call(&app, "POST", "/v1/collections/good/search", Some(query)).await;
    assert_eq!(st, StatusCode::OK, "{found}");
    assert_eq!(found["hits"][0]["id"], "a");

    let (st, body) = call(&app, "GET", "/v1/collections/bad", None).await;
    assert_eq!(st, StatusCode::INTERNAL_SERVER_ERROR);
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be opened") && message.contains("DELETE"),
        "{body}"
    );
    let (st, body) = call(&app, "PUT", "/v1/collections/bad", None).await;
    assert_eq!(st, StatusCode::CONFLICT, "{body}");
    let (st, body) = call(&app, "DELETE", "/v1/collections/bad", None).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(!data.path().join("collections/bad").exists());
    let (st, body) = call(&app, "PUT", "/v1/collections/bad", None).await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let (_, ready) = call(&app, "GET", "/readyz", None).await;
    assert_eq!(ready["broken_collections"], json!({}), "{ready}");
}
