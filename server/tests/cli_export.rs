//! `lexlip export`: the JSONL export re-indexes into the same collection (the oracle of the
//! format), and the OpenSearch / Elasticsearch / Qdrant exports carry every document's impacts
//! in the documented shape (escaped feature names, term ids of the vocabulary).

use std::collections::BTreeMap;
use std::path::Path;

use lexlip_tests::{contents, impacts, lexlip, lexlip_json, line};
use serde_json::Value;

const VOCAB: &str = "[PAD]\ndog\ncat\ngrass\n.\n50%\n";

const VECTORS: &str = r#"{"id":"a","contents":"a dog","vector":{"dog":200,"grass":30,".":7}}
{"id":"b","contents":"a cat","vector":{"cat":150,"50%":2},"metadata":{"split":"val","n":3}}
{"id":"img/c.jpg","modality":"image","uri":"img/c.jpg","vector":{"dog":50,"grass":120}}
"#;

/// `lexlip index --vectors FILE [--vocab V] --json` into `col`; its summary.
fn index_vectors(col: &Path, vectors: &Path, vocab: Option<&Path>) -> Value {
    let mut args = vec![
        "index",
        "--collection",
        col.to_str().unwrap(),
        "--vectors",
        vectors.to_str().unwrap(),
        "--json",
    ];
    if let Some(v) = vocab {
        args.extend(["--vocab", v.to_str().unwrap()]);
    }
    lexlip_json(&args)
}

fn build(dir: &Path) -> std::path::PathBuf {
    let vectors = dir.join("v.jsonl");
    std::fs::write(&vectors, VECTORS).unwrap();
    let vocab = dir.join("vocab.txt");
    std::fs::write(&vocab, VOCAB).unwrap();
    let col = dir.join("col");
    let s = index_vectors(&col, &vectors, Some(&vocab));
    assert_eq!(s["indexed"], 3, "{s}");
    col
}

/// `lexlip export … --out FILE`; the run's output.
fn export_to(col: &Path, format: &str, out: &Path) -> std::process::Output {
    lexlip(&line(
        "export",
        &[
            ("--collection", &col),
            ("--format", &format),
            ("--out", &out),
        ],
    ))
}

fn export(col: &Path, format: &str) -> Vec<Value> {
    let out = lexlip(&line(
        "export",
        &[("--collection", &col), ("--format", &format)],
    ));
    lexlip_tests::assert_success(&out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn jsonl_export_reindexes_to_the_same_collection() {
    let dir = tempfile::tempdir().unwrap();
    let col = build(dir.path());
    let out = dir.path().join("export.jsonl");
    let run = export_to(&col, "jsonl", &out);
    assert!(run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("exported 3 documents"));
    let again = dir.path().join("again");
    let s = index_vectors(&again, &out, Some(&dir.path().join("vocab.txt")));
    assert_eq!(s["indexed"], 3, "{s}");
    assert_eq!(contents(&again), contents(&col));
}

#[test]
fn bulk_exports_carry_every_impact_in_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let col = build(dir.path());
    let stored = impacts(&col);
    for format in ["opensearch", "elasticsearch"] {
        let lines = export(&col, format);
        assert_eq!(lines.len(), 2 * stored.len(), "{format}");
        for pair in lines.chunks(2) {
            let (action, source) = (&pair[0], &pair[1]);
            assert_eq!(action["index"]["_index"], "col", "{action}");
            let id = action["index"]["_id"].as_str().unwrap();
            assert_eq!(source["id"], id);
            let terms: BTreeMap<String, u32> = source["terms"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap() as u32))
                .collect();
            let want: BTreeMap<String, u32> = stored[id]
                .iter()
                .map(|(t, i)| (t.replace('%', "%25").replace('.', "%2E"), *i))
                .collect();
            assert_eq!(terms, want, "{format} {id}");
            assert!(terms.keys().all(|k| !k.contains('.')));
        }
    }
    let b = export(&col, "opensearch")
        .into_iter()
        .find(|v| v["id"] == "b")
        .unwrap();
    assert_eq!(b["metadata"]["split"], "val");
    assert_eq!(b["text"], "a cat");

    let vocab: Vec<&str> = VOCAB.lines().collect();
    let points = export(&col, "qdrant");
    assert_eq!(points.len(), stored.len());
    for p in &points {
        let id = p["payload"]["id"].as_str().unwrap();
        let uuid = p["id"].as_str().unwrap();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "8", "UUID version 8: {uuid}");
        let sparse = &p["vector"]["lexlip"];
        let indices: Vec<usize> = sparse["indices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert!(
            indices.windows(2).all(|w| w[0] < w[1]),
            "sorted: {indices:?}"
        );
        let got: BTreeMap<String, u32> = indices
            .iter()
            .zip(sparse["values"].as_array().unwrap())
            .map(|(&i, v)| (vocab[i].to_string(), v.as_f64().unwrap() as u32))
            .collect();
        let want: BTreeMap<String, u32> = stored[id].iter().cloned().collect();
        assert_eq!(got, want, "{id}");
    }
    // Ids map to the same point on every export.
    assert_eq!(points, export(&col, "qdrant"));
}

/// A collection built from vectors without a vocabulary numbers its terms in the order of its
/// term dictionary and writes that list beside the export; without a place for it, the export
/// says which flag gives one.
#[test]
fn qdrant_without_a_vocabulary_numbers_the_term_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let vectors = dir.path().join("v.jsonl");
    std::fs::write(&vectors, VECTORS).unwrap();
    let col = dir.path().join("free");
    index_vectors(&col, &vectors, None);
    let out = lexlip(&[
        "export",
        "--collection",
        col.to_str().unwrap(),
        "--format",
        "qdrant",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs term ids") && err.contains("--vocab-out"),
        "{err}"
    );

    let points_file = dir.path().join("points.jsonl");
    let out = export_to(&col, "qdrant", &points_file);
    lexlip_tests::assert_success(&out);
    let list = std::fs::read_to_string(dir.path().join("points.jsonl.vocab.txt")).unwrap();
    let terms: Vec<&str> = list.lines().collect();
    let mut sorted = terms.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(terms, sorted, "distinct, in byte order");
    let stored = impacts(&col);
    let points: Vec<Value> = std::fs::read_to_string(&points_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(points.len(), stored.len());
    for p in &points {
        let id = p["payload"]["id"].as_str().unwrap();
        let sparse = &p["vector"]["lexlip"];
        let got: BTreeMap<String, u32> = sparse["indices"]
            .as_array()
            .unwrap()
            .iter()
            .zip(sparse["values"].as_array().unwrap())
            .map(|(i, v)| {
                let term = terms[i.as_u64().unwrap() as usize].to_string();
                (term, v.as_f64().unwrap() as u32)
            })
            .collect();
        let want: BTreeMap<String, u32> = stored[id].iter().cloned().collect();
        assert_eq!(got, want, "{id}");
    }
}

/// The Qdrant export in a real engine (Qdrant's local mode, from PyPI): the same query finds
/// the same top 10 with the same scores as `lexlip search`. Skipped where the Python package is
/// not installed (`.ci/run` installs it into target/deploy-tools).
#[test]
fn qdrant_ranks_the_export_as_lexlip_does() {
    let python = lexlip_tests::workspace().join("target/deploy-tools/bin/python");
    let has_qdrant = std::process::Command::new(&python)
        .args(["-c", "import qdrant_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_qdrant {
        eprintln!("skipped: no qdrant-client in target/deploy-tools (.ci/run installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let terms: Vec<String> = (0..60).map(|i| format!("t{i}")).collect();
    let vocab = dir.path().join("vocab.txt");
    std::fs::write(&vocab, format!("[PAD]\n{}\n", terms.join("\n"))).unwrap();
    let mut x: u64 = 0x853c_49e6_748f_ea9b;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut lines = String::new();
    for d in 0..300 {
        let vector: serde_json::Map<String, Value> = (0..12)
            .map(|_| {
                let t = &terms[(next() % 60) as usize];
                (t.clone(), Value::from(1 + next() % 200))
            })
            .collect();
        lines.push_str(&serde_json::json!({"id": format!("d{d}"), "vector": vector}).to_string());
        lines.push('\n');
    }
    let vectors = dir.path().join("v.jsonl");
    std::fs::write(&vectors, lines).unwrap();
    let col = dir.path().join("col");
    index_vectors(&col, &vectors, Some(&vocab));
    let points = dir.path().join("points.jsonl");
    let out = export_to(&col, "qdrant", &points);
    assert!(out.status.success());
    let query = r#"{"t3": 40, "t17": 25, "t42": 9, "t5": 3}"#;
    let ours = lexlip_json(&[
        "search",
        "--collection",
        col.to_str().unwrap(),
        "--vector",
        query,
        "-k",
        "10",
        "--json",
    ]);
    let script = lexlip_tests::workspace().join("scripts/qdrant_export_search.py");
    let theirs = std::process::Command::new(&python)
        .arg(script)
        .args([
            points.to_str().unwrap(),
            vocab.to_str().unwrap(),
            query,
            "10",
        ])
        .output()
        .unwrap();
    lexlip_tests::assert_success(&theirs);
    let theirs: Value = serde_json::from_slice(&theirs.stdout).unwrap();
    let ours = lexlip_tests::hit_scores(&ours);
    let theirs: Vec<(String, f64)> = theirs["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h[0].as_str().unwrap().to_string(), h[1].as_f64().unwrap()))
        .collect();
    assert_eq!(ours.len(), 10);
    let scores = |v: &[(String, f64)]| v.iter().map(|h| h.1).collect::<Vec<_>>();
    assert_eq!(scores(&ours), scores(&theirs), "{ours:?}\n{theirs:?}");
    // Ids agree wherever the score does not tie with the 10th.
    let tenth = ours[9].1;
    let above = |v: &[(String, f64)]| {
        v.iter()
            .filter(|h| h.1 > tenth)
            .map(|h| h.0.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(above(&ours), above(&theirs));
}
