//! The dense baseline end to end: `lexlip train --objective dense` writes a directory that
//! `lexlip encode --model DIR` encodes into dense vectors (and no terms), that `lexlip serve`
//! uses as `--dense-model` beside a LexLIP model (dense search ranks as brute-force cosine over
//! the same encoder's vectors), and that `lexlip index` turns into a collection of dense vectors,
//! alone or beside a LexLIP model's lexicons (`--dense-model`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use lexlip_model::{Device, Encoders};
use lexlip_tests::{
    Server, b64_bytes, fixtures, lexlip, lexlip_json, lexlip_tiny_args, lexlip_tiny_line, line, png,
};
use serde_json::{Value, json};

/// 8 generated images with two captions each, as a caption TSV; returns the TSV.
fn corpus(dir: &Path) -> PathBuf {
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    for i in 0..8u32 {
        let rel = format!("img{i}.png");
        std::fs::write(dir.join(&rel), png(i, 20)).unwrap();
        tsv.push_str(&format!("picture number {i}\t{rel}\timg{i}\n"));
        tsv.push_str(&format!("the image called {i}\t{rel}\timg{i}\n"));
    }
    let path = dir.join("captions.tsv");
    std::fs::write(&path, tsv).unwrap();
    path
}

/// `lexlip train` arguments for a tiny dense run of `steps` on [`corpus`] into `out`.
fn train_args(tsv: &Path, out: &Path, steps: &str) -> Vec<OsString> {
    let tokenizer = fixtures().join("vocab1000/tokenizer.json");
    line(
        &format!(
            "train --objective dense --dense-dim 16 --image-config tiny --image-size 16 \
             --patch-size 8 --max-length 12 --batch-size 4 --steps {steps}"
        ),
        &[
            ("--tsv", &tsv),
            ("--tokenizer", &tokenizer),
            ("--out", &out),
        ],
    )
}

/// A few steps of dense training through the command line; returns the model directory.
fn train_dense(dir: &Path) -> PathBuf {
    let tsv = corpus(dir);
    let out = dir.join("dense");
    let mut args = train_args(&tsv, &out, "3");
    args.push("--json".into());
    let run = lexlip(&args);
    lexlip_tests::assert_success(&run);
    let stdout = String::from_utf8_lossy(&run.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["summary"]["steps_done"], 3, "{stdout}");
    let step: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert!(step["info_nce"].as_f64().unwrap().is_finite(), "{step}");
    out
}

/// Without a terminal (a log file, a batch job) the progress bar draws nothing, so what it
/// would show is written as lines: the run's messages and every logged step; with a grouped
/// sampler, its regrouping at each epoch's end.
#[test]
fn train_without_a_terminal_logs_plain_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let tsv = corpus(tmp.path());
    let mut args = train_args(&tsv, &tmp.path().join("dense"), "6");
    args.extend(line("--log-every 1 --sampler grouped --group-size 4", &[]));
    let run = lexlip(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("text tower:"), "{stderr}");
    assert!(stderr.contains("step 6/6 epoch"), "{stderr}");
    assert!(
        stderr.contains("grouped sampler: epoch 2's mini-batches"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("done: step 6 of 6"));
}

fn unit(v: &Value, dim: usize) -> Vec<f32> {
    let v: Vec<f32> = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(v.len(), dim);
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    v
}

#[test]
fn a_trained_dense_model_encodes_indexes_and_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let model = train_dense(tmp.path());
    let enc = Encoders::load(&model, &Device::Cpu).unwrap();
    let dense = enc.dense().unwrap();

    // `lexlip encode --model DIR`: a dense-only model prints its dense vector and no terms.
    let m = model.to_str().unwrap();
    let text = lexlip_json(&line(
        "encode --json",
        &[("--model", &m), ("--text", &"picture number 3")],
    ));
    assert!(text.get("terms").is_none(), "{text}");
    let got = unit(&text["dense"], 16);
    let query = dense.encode_texts(&["picture number 3"]).unwrap().remove(0);
    assert!(
        got.iter()
            .zip(query.as_slice())
            .all(|(a, b)| (a - b).abs() < 1e-6)
    );
    let img = tmp.path().join("img3.png");
    let image = lexlip_json(&line(
        "encode --json",
        &[("--model", &m), ("--image", &img)],
    ));
    unit(&image["dense"], 16);

    // `lexlip index` of a dense-only model: a collection of dense vectors (no vocabulary, empty
    // lexicons) that `lexlip search --mode dense` ranks as brute-force cosine over the model's
    // own vectors; a sparse search is refused with the way to search it.
    let collection = tmp.path().join("c");
    let tsv = tmp.path().join("captions.tsv");
    let c = collection.to_str().unwrap();
    // `lexlip index` of the corpus into `into`, with the `models` flags.
    let index = |into: &Path, models: Vec<OsString>| {
        let mut args = line("index", &[("--collection", &into), ("--tsv", &tsv)]);
        args.extend(models);
        lexlip(&args)
    };
    let out = index(&collection, line("", &[("--model", &m)]));
    lexlip_tests::assert_success(&out);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(collection.join("lexlip.json")).unwrap()).unwrap();
    assert_eq!(manifest["dense_dim"], 16, "{manifest}");
    let vectors = image_vectors(dense);
    assert_ranks_as_cosine(&dense_search(c, m), &vectors, &query);
    let out = lexlip(&line(
        "search",
        &[
            ("--collection", &c),
            ("--model", &m),
            ("--text", &"picture number 3"),
        ],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--mode dense"),
        "{err}"
    );

    // `--dense-model DIR` beside a LexLIP model keeps both: the lexicons and this model's
    // vectors. Into the dense-only collection it is refused (another term space); a dense
    // model given twice is refused too. Refusals change nothing.
    let both = tmp.path().join("both");
    let tiny_and_dense = || lexlip_tiny_line("", &[("--dense-model", &m)]);
    lexlip_tests::assert_success(&index(&both, tiny_and_dense()));
    let args = lexlip_tiny_line(
        "search --modality image -k 8 --json",
        &[("--collection", &both), ("--text", &"picture number 3")],
    );
    assert!(!lexlip_tests::hit_scores(&lexlip_json(&args)).is_empty());
    let before = std::fs::read(collection.join("lexlip.json")).unwrap();
    assert!(!index(&collection, tiny_and_dense()).status.success());
    let out = index(
        &collection,
        line("", &[("--model", &m), ("--dense-model", &m)]),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("dense encoder of its own"), "{err}");
    assert_eq!(
        std::fs::read(collection.join("lexlip.json")).unwrap(),
        before
    );

    // `lexlip serve --model LEXLIP --dense-model DIR`: documents get this model's vectors and a
    // dense search ranks images by cosine with the query's vector.
    let data = tempfile::tempdir().unwrap();
    let mut args = lexlip_tiny_args();
    args.extend(["--dense-model".to_string(), m.to_string()]);
    let s = Server::start(data.path(), &args);
    assert_eq!(s.create("c", json!({"dense": true}))["dense_dim"], 16);
    add_images(&s);
    let q = json!({"query": {"text": "picture number 3"}, "target": "image", "k": 8,
                   "mode": "dense", "exact": true});
    let (st, r) = s.call("POST", "/v1/collections/c/search", Some(&q));
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["path"], "dense");
    assert_ranks_as_cosine(&lexlip_tests::hit_scores(&r), &vectors, &query);
    s.stop();
}

/// Adds the images `img0..img7` of [`corpus`] to the collection `c` of `s`.
fn add_images(s: &Server) {
    let docs: Vec<Value> = (0..8)
        .map(|i| json!({"id": format!("img{i}"), "image": b64_bytes(&png(i, 20))}))
        .collect();
    s.add("c", docs);
}

/// The dense vectors of the images `img0..img7` of [`corpus`], by `dense` in-process.
fn image_vectors(dense: &dyn lexlip_model::DenseEncoder) -> Vec<lexlip_proto::DenseVector> {
    let images: Vec<_> = (0..8)
        .map(|i| dense.preprocess_image(&png(i, 20), "img").unwrap())
        .collect();
    dense.encode_images(&images).unwrap()
}

/// `lexlip search --mode dense` of "picture number 3" among the images of `collection`.
fn dense_search(collection: &str, model: &str) -> Vec<(String, f64)> {
    lexlip_tests::hit_scores(&lexlip_json(&line(
        "search --mode dense --modality image -k 8 --json",
        &[
            ("--collection", &collection),
            ("--model", &model),
            ("--text", &"picture number 3"),
        ],
    )))
}

/// The oracle of a dense search over `img0..img7`: the cosine of `query` with each image's
/// vector, computed by the same encoder in-process; only ties may swap two ids.
fn assert_ranks_as_cosine(
    hits: &[(String, f64)],
    vectors: &[lexlip_proto::DenseVector],
    query: &lexlip_proto::DenseVector,
) {
    let mut want: Vec<(String, f64)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("img{i}"), f64::from(v.dot(query))))
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert_eq!(hits.len(), want.len(), "{hits:?}");
    for ((gid, gs), (wid, ws)) in hits.iter().zip(&want) {
        assert!((gs - ws).abs() < 1e-4, "{hits:?} vs {want:?}");
        if gid != wid {
            let other = want.iter().find(|(id, _)| id == gid).unwrap().1;
            assert!((other - ws).abs() < 1e-5, "{hits:?} vs {want:?}");
        }
    }
}

/// `lexlip train --objective heads` over the dense model: lexicon heads onto BERT's vocabulary
/// (the SPLADE tokenizer's, not the backbone's own 1,000 pieces), exported as a model directory
/// that `lexlip serve --model` indexes and searches sparsely. Every hit's explanation names
/// terms both lexicons hold, and the hits rank as the in-process quantized dot product does.
/// (Recall of real heads is measured by `lexlip eval`, docs/benchmarks.md.)
#[test]
fn heads_over_a_trained_dense_model_serve_sparse_search() {
    let tmp = tempfile::tempdir().unwrap();
    let dense = train_dense(tmp.path());
    let heads = tmp.path().join("heads");
    let tsv = tmp.path().join("captions.tsv");
    let vocab = lexlip_tests::splade_dir().join("tokenizer.json");
    // The dense run's corpus and schedule; the dense objective's own options give way to the
    // heads'.
    let args = line(
        "train --objective heads --max-length 12 --batch-size 4 --steps 4 --image-top-k 8 \
         --text-top-k 4",
        &[
            ("--tsv", &tsv),
            ("--tokenizer", &vocab),
            ("--out", &heads),
            ("--backbone", &dense),
        ],
    );
    let run = lexlip(&args);
    lexlip_tests::assert_success(&run);
    assert!(heads.join("heads/config.json").is_file());
    assert!(heads.join("dense/model.safetensors").is_file());
    // No terminal: the embedding cache's progress is written as lines, the last saying what
    // it did and in how long; each logged step with its ETA.
    let stderr = String::from_utf8_lossy(&run.stderr);
    let cached = stderr
        .lines()
        .rfind(|l| l.starts_with("caching embeddings: "))
        .unwrap_or_default();
    assert!(
        cached.contains("(100 %)") && cached.contains("done in"),
        "{stderr}"
    );
    assert!(stderr.contains("step 4/4 epoch 1.00"), "{stderr}");
    // The heads' own defaults where the line gave none; what it gave stays.
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(heads.join("train.json")).unwrap()).unwrap();
    let o = &meta["options"];
    assert_eq!(
        (o["tau"].as_f64(), o["lr"].as_f64()),
        (Some(0.5), Some(0.01))
    );
    assert_eq!(o["grounding"].as_f64(), Some(1.0));
    assert_eq!(
        (
            o["caption_words"].as_f64(),
            o["caption_words_text"].as_f64(),
            o["caption_words_tau"].as_f64()
        ),
        (Some(1.0), Some(0.3), None),
        "the caption words on both sides, at their default temperature (not recorded)"
    );
    assert_eq!(o["batch_size"].as_u64(), Some(4));

    // The same model in-process: the oracle.
    let enc = Encoders::load(&heads, &Device::Cpu).unwrap();
    let text = enc.text().unwrap().encode(&["picture number 3"]).unwrap();
    assert!(text[0].len() <= 4);
    let image = enc.image().unwrap();
    let lexicons: Vec<_> = (0..8)
        .map(|i| {
            let img = image.preprocess(&png(i, 20)).unwrap();
            image.encode(&[img]).unwrap().remove(0)
        })
        .collect();
    assert!(lexicons.iter().all(|l| l.len() <= 8));
    let impacts = |v: &lexlip_proto::SparseVector| -> std::collections::BTreeMap<String, u64> {
        v.iter()
            .map(|(t, w)| (t.to_string(), (100.0 * f64::from(w)).floor() as u64))
            .filter(|(_, i)| *i > 0)
            .collect()
    };
    // A 3-step backbone's image and text lexicons rarely share a term (and some of its
    // images' lexicons are empty), so the query is the image of the collection with the most
    // terms (image → image), which shares its own.
    let query = (0..8).max_by_key(|&i| lexicons[i].len()).unwrap() as u32;
    let q = &lexicons[query as usize];
    assert!(!q.is_empty(), "every image lexicon is empty");
    let qi = impacts(q);
    let dot = |d: &lexlip_proto::SparseVector| -> u64 {
        let di = impacts(d);
        qi.iter()
            .map(|(t, w)| w * di.get(t).copied().unwrap_or(0))
            .sum()
    };

    let data = tempfile::tempdir().unwrap();
    let s = Server::with_model(data.path(), &heads);
    s.create("c", json!({}));
    add_images(&s);
    let q_json = json!({"query": {"image": b64_bytes(&png(query, 20))}, "target": "image", "k": 8,
                        "exact": true, "explain": true});
    let (st, r) = s.call("POST", "/v1/collections/c/search", Some(&q_json));
    assert_eq!(st, 200, "{r}");
    let want: Vec<u64> = {
        let mut v: Vec<u64> = lexicons.iter().map(dot).filter(|s| *s > 0).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };
    assert!(!want.is_empty(), "the query shares no term with any image");
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(hits.len(), want.len(), "{r}");
    for (h, w) in hits.iter().zip(&want) {
        let id = h["id"].as_str().unwrap();
        let i: usize = id.trim_start_matches("img").parse().unwrap();
        assert_eq!(dot(&lexicons[i]), *w, "{id} ranks as the oracle does: {r}");
        let doc = impacts(&lexicons[i]);
        let explain = h["explain"].as_array().expect("explained hits");
        assert!(!explain.is_empty(), "{r}");
        for e in explain {
            let term = e["term"].as_str().unwrap();
            assert!(
                qi.contains_key(term) && doc.contains_key(term),
                "{term}: {r}"
            );
        }
    }
    s.stop();

    // `lexlip index --dense` with the heads: the lexicons and the backbone's own embeddings,
    // from one pass per batch; a dense search ranks as cosine over the backbone's vectors.
    let backbone = enc.dense().expect("heads carry their backbone");
    let vectors = image_vectors(backbone);
    let query = backbone
        .encode_texts(&["picture number 3"])
        .unwrap()
        .remove(0);
    index_dense_and_search(&tmp.path().join("indexed"), &tsv, &heads, &vectors, &query);
}

/// `lexlip index --dense` of the corpus `tsv` with `model` into `collection`; a dense search of
/// "picture number 3" then ranks as cosine between `query` and the images' `vectors`.
fn index_dense_and_search(
    collection: &Path,
    tsv: &Path,
    model: &Path,
    vectors: &[lexlip_proto::DenseVector],
    query: &lexlip_proto::DenseVector,
) {
    let (c, m) = (collection.to_str().unwrap(), model.to_str().unwrap());
    let out = lexlip(&line(
        "index --dense",
        &[("--collection", &c), ("--tsv", &tsv), ("--model", &m)],
    ));
    lexlip_tests::assert_success(&out);
    assert_ranks_as_cosine(&dense_search(c, m), vectors, query);
}

/// `lexlip train --objective heads` over a MobileCLIP in open_clip's layout (the tiny random one
/// of the parity test): the exported directory carries the backbone's files as `dense/`, its
/// dense vectors are the backbone's own, its lexicons keep the top-K, and `lexlip index
/// --dense` plus a dense search rank as cosine over the backbone's vectors.
#[test]
fn heads_over_a_mobileclip_backbone_export_and_index() {
    let tmp = tempfile::tempdir().unwrap();
    let tsv = corpus(tmp.path());
    let out = tmp.path().join("heads");
    let backbone_dir = fixtures().join("mobileclip-tiny");
    let vocab = lexlip_tests::splade_dir().join("tokenizer.json");
    let run = lexlip(&line(
        "train --objective heads --batch-size 4 --steps 2 --image-top-k 8 --text-top-k 4",
        &[
            ("--backbone", &backbone_dir),
            ("--tokenizer", &vocab),
            ("--tsv", &tsv),
            ("--out", &out),
        ],
    ));
    lexlip_tests::assert_success(&run);
    assert!(out.join("dense/open_clip_config.json").is_file());

    let enc = Encoders::load(&out, &Device::Cpu).unwrap();
    let own = lexlip_model::MobileClipEncoder::load(&backbone_dir, &Device::Cpu).unwrap();
    let dense = enc.dense().expect("heads carry their backbone");
    use lexlip_model::DenseEncoder;
    assert_eq!(
        dense.encode_texts(&["picture number 3"]).unwrap(),
        own.encode_texts(&["picture number 3"]).unwrap()
    );
    let text = enc.text().unwrap().encode(&["picture number 3"]).unwrap();
    assert!(!text[0].is_empty() && text[0].len() <= 4, "{:?}", text[0]);
    let image = enc.image().unwrap();
    let lexicon = image
        .encode(&[image.preprocess(&png(3, 20)).unwrap()])
        .unwrap()
        .remove(0);
    assert!(!lexicon.is_empty() && lexicon.len() <= 8, "{lexicon:?}");

    let vectors = image_vectors(&own);
    let query = own.encode_texts(&["picture number 3"]).unwrap().remove(0);
    index_dense_and_search(&tmp.path().join("indexed"), &tsv, &out, &vectors, &query);
}

/// `lexlip bench encode` on a dense-only model times its dense towers (the batch sizes given
/// space- or comma-separated), and says so in its JSON report.
#[test]
fn bench_encode_times_a_dense_only_model() {
    let model = fixtures().join("mobileclip-tiny");
    for sizes in [&["1", "2"][..], &["1,2"][..]] {
        let mut args = vec!["bench", "encode", "--model", model.to_str().unwrap()];
        args.push("--batch-sizes");
        args.extend(sizes);
        args.extend(["--seconds", "0.1", "--json"]);
        let out = lexlip(&args);
        lexlip_tests::assert_success(&out);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(report["dense_model"].as_str().is_some(), "{report}");
        for side in ["dense_text", "dense_image"] {
            let rows = report[side].as_array().unwrap();
            let batches: Vec<u64> = rows.iter().map(|r| r["batch"].as_u64().unwrap()).collect();
            assert_eq!(batches, [1, 2], "{report}");
            assert!(
                rows.iter()
                    .all(|r| r["items_per_s"].as_f64().unwrap() > 0.0)
            );
        }
        assert_eq!(report["image"].as_array().map(Vec::len), Some(0));
    }
}
