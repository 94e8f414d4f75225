//! The real `lexlip` binary on real files: index, stats, search, batch search, bad input.

use std::path::Path;

use lexlip_tests::{lexlip, lexlip_json, line};

fn write_gz(path: &Path, text: &str) {
    use std::io::Write;
    let f = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
}

const VECTORS: &str = r#"{"id":"a","contents":"a brown dog runs","vector":{"dog":200,"brown":90,"grass":30}}
{"id":"b","contents":"a cat","vector":{"cat":1.5,"dog":0.1}}
not json
{"id":"c","vector":{"dog":-1}}

{"id":"d","modality":"image","uri":"img/d.jpg","vector":{"dog":50,"grass":120},"metadata":{"split":"val"}}
"#;

#[test]
fn index_stats_search_and_batch() {
    let dir = tempfile::tempdir().unwrap();
    let vectors = dir.path().join("v.jsonl.gz");
    write_gz(&vectors, VECTORS);
    let col = dir.path().join("col");
    let errors = dir.path().join("errors.jsonl");
    let (col_s, vec_s, err_s) = (
        col.to_str().unwrap(),
        vectors.to_str().unwrap(),
        errors.to_str().unwrap(),
    );

    let summary = lexlip_json(&line(
        "index --json",
        &[
            ("--collection", &col_s),
            ("--vectors", &vec_s),
            ("--errors", &err_s),
        ],
    ));
    assert_eq!(summary["read"], 5);
    assert_eq!(summary["indexed"], 3);
    assert_eq!(
        summary["skipped"],
        serde_json::json!({"json": 1, "vector": 1})
    );
    let errs = std::fs::read_to_string(&errors).unwrap();
    let lines: Vec<serde_json::Value> = errs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        (lines[0]["line"].as_u64(), lines[1]["line"].as_u64()),
        (Some(3), Some(4))
    );

    let stats = lexlip_json(&["stats", "--collection", col_s, "--json"]);
    assert_eq!(
        (
            stats["documents"].as_u64(),
            stats["terms"].as_u64(),
            stats["nnz"].as_u64()
        ),
        (Some(3), Some(4), Some(7))
    );
    assert!(stats["bytes_per_nnz"].as_f64().unwrap() > 0.0);
    // The sparse index and the stored fields are parts of the bytes on disk, reported apart.
    let bytes = |key: &str| stats[key].as_u64().unwrap();
    assert!(bytes("index_bytes") >= bytes("forward_file_bytes"));
    // The vectors' own structures: the forward files and the impacts postings and dictionary,
    // within the index (which also holds the id, modality and metadata keys).
    assert!(bytes("vector_index_bytes") > bytes("forward_file_bytes"));
    assert!(bytes("vector_index_bytes") < bytes("index_bytes"));
    assert!(bytes("forward_file_bytes") > 0 && bytes("stored_bytes") > 0);
    assert!(bytes("index_bytes") + bytes("stored_bytes") <= bytes("bytes"));
    assert!(
        stats["index_bytes_per_nnz"].as_f64().unwrap() < stats["bytes_per_nnz"].as_f64().unwrap()
    );

    let out = lexlip_json(&line(
        "search --explain --json",
        &[
            ("--collection", &col_s),
            ("--vector", &r#"{"dog":120,"grass":80}"#),
        ],
    ));
    let hits = out["hits"].as_array().unwrap();
    let got: Vec<(&str, f64)> = hits
        .iter()
        .map(|h| (h["id"].as_str().unwrap(), h["score"].as_f64().unwrap()))
        .collect();
    assert_eq!(got, vec![("a", 26400.0), ("d", 15600.0), ("b", 1200.0)]);
    assert_eq!(hits[0]["explain"][0]["term"], "dog");
    assert_eq!(hits[0]["explain"][0]["contribution"], 24000);

    let images = lexlip_json(&[
        "search",
        "--collection",
        col_s,
        "--vector",
        r#"{"dog":1}"#,
        "--modality",
        "image",
        "--json",
    ]);
    assert_eq!(images["hits"].as_array().unwrap().len(), 1);
    assert_eq!(images["hits"][0]["metadata"]["split"], "val");

    let queries = dir.path().join("q.jsonl");
    std::fs::write(
        &queries,
        "{\"id\":\"q1\",\"vector\":{\"dog\":100}}\n{\"id\":\"q2\",\"vector\":{\"cat\":1.0}}\n",
    )
    .unwrap();
    let run = dir.path().join("out.trec");
    let out = lexlip(&[
        "search",
        "--collection",
        col_s,
        "--queries",
        queries.to_str().unwrap(),
        "--run",
        run.to_str().unwrap(),
        "-k",
        "2",
        "--threads",
        "2",
    ]);
    lexlip_tests::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("queries/s"));
    assert_eq!(
        std::fs::read_to_string(&run).unwrap(),
        "q1 Q0 a 1 20000 lexlip\nq1 Q0 d 2 5000 lexlip\nq2 Q0 b 1 15000 lexlip\n"
    );

    // Re-indexing the same file replaces documents instead of duplicating them.
    lexlip_json(&["index", "--collection", col_s, "--vectors", vec_s, "--json"]);
    assert_eq!(
        lexlip_json(&["stats", "--collection", col_s, "--json"])["documents"],
        3
    );
}

#[test]
fn bad_input_gets_clear_errors_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let col = dir.path().join("col");
    let col_s = col.to_str().unwrap();
    let missing = lexlip(&["search", "--collection", col_s, "--vector", r#"{"dog":1}"#]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no collection at"));

    let vectors = dir.path().join("v.jsonl");
    std::fs::write(&vectors, "{\"id\":\"a\",\"vector\":{\"dog\":3}}\n").unwrap();
    let vocab = dir.path().join("vocab.txt");
    std::fs::write(&vocab, "[PAD]\ndog\ncat\n").unwrap();
    let other = dir.path().join("other.txt");
    std::fs::write(&other, "[PAD]\ncat\n").unwrap();
    let v = vectors.to_str().unwrap();
    lexlip_json(&line(
        "index --json",
        &[
            ("--collection", &col_s),
            ("--vectors", &v),
            ("--vocab", &vocab),
        ],
    ));
    let refused = lexlip(&line(
        "index",
        &[
            ("--collection", &col_s),
            ("--vectors", &v),
            ("--vocab", &other),
        ],
    ));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("term space mismatch"));

    // Every line bad: nothing indexed, non-zero exit, collection unchanged.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\":\"z\",\"vector\":{\"zebra\":3}}\nnot json\n").unwrap();
    let out = lexlip(&line(
        "index",
        &[("--collection", &col_s), ("--vectors", &bad)],
    ));
    assert!(!out.status.success());
    assert_eq!(
        lexlip_json(&["stats", "--collection", col_s, "--json"])["documents"],
        1
    );

    // A small gzip that expands to one 20 MB line: refused at 16 MiB, collection unchanged.
    let bomb = dir.path().join("bomb.jsonl.gz");
    write_gz(&bomb, &format!("{{\"id\":\"{}\"}}\n", "0".repeat(20 << 20)));
    assert!(std::fs::metadata(&bomb).unwrap().len() < 200_000);
    let out = lexlip(&line(
        "index",
        &[("--collection", &col_s), ("--vectors", &bomb)],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 1 is longer than 16777216 bytes"),
        "{err}"
    );
    assert_eq!(
        lexlip_json(&["stats", "--collection", col_s, "--json"])["documents"],
        1
    );
    // Into a new collection: the failed run leaves no empty collection behind.
    let fresh = dir.path().join("fresh");
    let out = lexlip(&line(
        "index",
        &[("--collection", &fresh), ("--vectors", &bomb)],
    ));
    assert!(!out.status.success());
    assert!(!fresh.exists(), "an empty collection was left behind");

    for q in ["{\"dog\": -1}", "{\"dog\": \"x\"}", "not json"] {
        let out = lexlip(&["search", "--collection", col_s, "--vector", q]);
        assert!(!out.status.success(), "{q}");
    }
    // Refused options name themselves; a term cut alone searches.
    let search = |extra: &[&'static str]| -> Vec<String> {
        ["search", "--collection", col_s, "--vector", "{\"dog\":1}"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    for (extra, says) in [
        (["-k", "0"], "k must be"),
        (["--term-cut", "2"], "term_cut must be"),
        (["--idf", "5"], "idf must be"),
    ] {
        let out = lexlip(&search(&extra));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{extra:?}"
        );
    }
    let out = lexlip_json(&search(&["--term-cut", "0.2", "--json"]));
    assert!(out["hits"].is_array(), "{out}");
    let out = lexlip_json(&search(&["--idf", "1", "--json"]));
    assert!(out["hits"].is_array(), "{out}");

    // The server's defaults are checked before it loads or creates anything.
    let data = dir.path().join("serve-data");
    for (flag, value, says) in [
        ("--term-cut", "1.5", "--term-cut: term_cut must be"),
        ("--idf", "9", "--idf: idf must be"),
    ] {
        let d = data.display().to_string();
        let out = lexlip(&["serve", "--data", &d, flag, value]);
        assert!(!out.status.success(), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{flag}: {stderr}");
        assert!(!data.exists(), "a refused server made {d}");
    }
}

/// `lexlip bench engine`, keeping its collection (`--dir`) and queries (`--write-queries`):
/// `lexlip bench search` then searches the same collection with the same queries.
#[test]
fn bench_engine_reports_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let (col, queries) = (dir.path().join("col"), dir.path().join("q.jsonl"));
    let (col_s, queries_s) = (col.to_str().unwrap(), queries.to_str().unwrap());
    let unwritable = dir.path().join("no/such/dir/q.jsonl");
    let refused = lexlip(&line(
        "bench engine --docs 3000",
        &[("--dir", &col_s), ("--write-queries", &unwritable)],
    ));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot write"));
    assert!(!col.exists(), "refused before building anything");
    let out = lexlip_json(&line(
        "bench engine --docs 3000 --queries 20 --approx 1.5,3 --term-cut 0.1 --json",
        &[("--dir", &col_s), ("--write-queries", &queries_s)],
    ));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&queries)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(lines[3]["id"], "q3");
    let again = lexlip_json(&line(
        "bench search --json",
        &[("--collection", &col_s), ("--queries", &queries_s)],
    ));
    assert_eq!(again["docs"], 3000);
    assert_eq!(again["queries"], 20);
    assert_eq!(again["mean_query_nnz"], out["mean_query_nnz"]);
    assert_eq!(again["search"]["exact"]["recall_at_10"], 1.0);
    assert_eq!(out["docs"], 3000);
    assert_eq!(out["exact"]["recall_at_10"], 1.0);
    assert_eq!(out["exact_postings"]["recall_at_10"], 1.0);
    assert_eq!(out["exact_threads"][0]["threads"], 2);
    assert_eq!(out["exact_threads"][0]["figures"]["recall_at_10"], 1.0);
    assert!(out["bytes_per_nnz"].as_f64().unwrap() > 0.5);
    assert!(out["index_bytes_per_nnz"].as_f64().unwrap() > 0.5);
    assert!(out["stored_bytes"].as_u64().unwrap() > 0);
    assert_eq!(out["approx"].as_array().unwrap().len(), 3);
    assert_eq!(out["approx"][2]["knob"], 1.0);
    assert!((out["approx"][2]["term_cut"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    for key in ["ingest_docs_per_s", "exhaustive", "exact"] {
        assert!(out.get(key).is_some(), "{key}");
    }
}

/// One JsonVectorCollection line: terms `t{n}` with integer impacts.
fn vector_line(id: &str, terms: &[(u64, u64)]) -> String {
    let v: serde_json::Map<String, serde_json::Value> = terms
        .iter()
        .map(|&(t, w)| (format!("t{t}"), w.into()))
        .collect();
    format!("{}\n", serde_json::json!({"id": id, "vector": v}))
}

/// `lexlip bench search` on a real collection and query file: every exact algorithm finds the
/// exhaustive top k, and the ground truth written as a TREC run is the brute-force ranking,
/// whatever order `lexlip index --doc-order` wrote the documents in.
#[test]
fn bench_search_on_a_collection_and_queries() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs.jsonl");
    let queries = dir.path().join("queries.jsonl");
    // 600 documents over 40 terms; impacts from a fixed pseudo-random sequence.
    let mut rng = lexlip_index::synth::Rng::new(7);
    let mut next = move || rng.next_u64();
    let mut vectors: Vec<Vec<(u64, u64)>> = Vec::new();
    let mut text = String::new();
    for i in 0..600 {
        // A term drawn twice keeps its last impact, in the file and in the oracle alike.
        let terms: std::collections::BTreeMap<u64, u64> =
            (0..6).map(|_| (next() % 40, 1 + next() % 200)).collect();
        let terms: Vec<(u64, u64)> = terms.into_iter().collect();
        text += &vector_line(&format!("d{i}"), &terms);
        vectors.push(terms);
    }
    std::fs::write(&docs, text).unwrap();
    let query_terms = [
        vec![(3u64, 5u64), (17, 2)],
        vec![(8, 9)],
        vec![(1, 1), (2, 3), (39, 4)],
    ];
    let mut qtext = String::new();
    for (i, q) in query_terms.iter().enumerate() {
        qtext += &vector_line(&format!("q{i}"), q);
    }
    std::fs::write(&queries, qtext).unwrap();
    // Every document order gives the same results.
    for order in ["clusters", "bisection", "input"] {
        let col = dir.path().join(format!("col-{order}"));
        let truth = dir.path().join(format!("truth-{order}.run"));
        let (col_s, docs_s) = (col.to_str().unwrap(), docs.to_str().unwrap());
        lexlip_json(&line(
            "index --json",
            &[
                ("--collection", &col_s),
                ("--vectors", &docs_s),
                ("--doc-order", &order),
            ],
        ));
        let out = lexlip_json(&[
            "bench",
            "search",
            "--collection",
            col_s,
            "--queries",
            queries.to_str().unwrap(),
            "--block-size",
            "8",
            "--approx",
            "1.5",
            "--truth-run",
            truth.to_str().unwrap(),
            "--json",
        ]);
        assert_eq!(out["queries"], 3);
        assert_eq!(out["search"]["exact"]["recall_at_10"], 1.0);
        assert_eq!(out["search"]["exact_postings"]["recall_at_10"], 1.0);
        assert_eq!(
            out["search"]["exact_threads"][0]["figures"]["recall_at_10"],
            1.0
        );
        let run = std::fs::read_to_string(&truth).unwrap();
        for (i, q) in query_terms.iter().enumerate() {
            let mut want: Vec<u64> = vectors
                .iter()
                .map(|d| {
                    d.iter()
                        .filter_map(|(t, w)| q.iter().find(|(qt, _)| qt == t).map(|(_, qw)| w * qw))
                        .sum()
                })
                .filter(|&s| s > 0)
                .collect();
            want.sort_unstable_by(|a, b| b.cmp(a));
            want.truncate(10);
            let got: Vec<u64> = run
                .lines()
                .filter(|l| l.starts_with(&format!("q{i} ")))
                .map(|l| l.split(' ').nth(4).unwrap().parse().unwrap())
                .collect();
            assert_eq!(got, want, "query {i}, {order} order");
        }
    }
}
