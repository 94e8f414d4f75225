//! The published photo models served as they are, through the real binary: VDR cross-modal (the
//! tiny random instance its authors' code built, `model/tests/fixtures/vdr-tiny`) indexes images
//! at its own quantization scale, a text finds the image the reference's float lexicons rank
//! first, and the explanation lists the terms both share, strongest first; `hf:` ids resolve
//! from the Hugging Face cache offline, tokenizer taken from the base model's repository.

use std::collections::BTreeMap;
use std::path::Path;

use lexlip_tests::{Server, b64, fixtures, hf_cache_repo, splade_dir, success_json};
use serde_json::{Value, json};

fn vdr_args() -> Vec<String> {
    vec![
        "--model".into(),
        fixtures().join("vdr-tiny").display().to_string(),
        "--tokenizer".into(),
        splade_dir().join("tokenizer.json").display().to_string(),
    ]
}

/// A fixture lexicon (`{"ids", "weights"}`, BERT ids) as term → weight.
fn lexicon(v: &Value, tokens: &[String]) -> BTreeMap<String, f64> {
    let ids = v["ids"].as_array().unwrap();
    let weights = v["weights"].as_array().unwrap();
    ids.iter()
        .zip(weights)
        .map(|(i, w)| {
            let i = i.as_u64().unwrap() as usize;
            (tokens[i].clone(), w.as_f64().unwrap())
        })
        .collect()
}

fn dot(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> f64 {
    a.iter().filter_map(|(t, w)| b.get(t).map(|x| w * x)).sum()
}

fn bert_tokens() -> Vec<String> {
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(splade_dir().join("tokenizer.json")).unwrap(),
    )
    .unwrap();
    let vocab = json["model"]["vocab"].as_object().unwrap();
    let mut tokens = vec![String::new(); vocab.len()];
    for (t, i) in vocab {
        tokens[i.as_u64().unwrap() as usize] = t.clone();
    }
    tokens
}

#[test]
fn vdr_indexes_images_at_its_scale_and_texts_find_the_reference_first_image() {
    let fx: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("vdr.json")).unwrap())
            .unwrap();
    let tokens = bert_tokens();
    let data = tempfile::tempdir().unwrap();
    let s = Server::start(data.path(), &vdr_args());
    let (st, info) = s.call("PUT", "/v1/collections/c", Some(&json!({})));
    assert_eq!(st, 201, "{info}");
    assert_eq!(
        info["scale"].as_f64(),
        Some(10_000.0),
        "the model's own scale: {info}"
    );
    let images: Vec<(String, BTreeMap<String, f64>)> = fx["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let file = c["file"].as_str().unwrap().to_string();
            (file, lexicon(&c["lexicon"], &tokens))
        })
        .collect();
    let docs: Vec<Value> = images
        .iter()
        .map(|(f, _)| json!({"id": f, "image": b64(&fixtures().join("images").join(f))}))
        .collect();
    s.add("c", docs);

    let mut checked = 0;
    for case in fx["texts"].as_array().unwrap() {
        let query = lexicon(&case["lexicon"], &tokens);
        let mut expected: Vec<(f64, &str)> = images
            .iter()
            .map(|(f, l)| (dot(&query, l), f.as_str()))
            .collect();
        expected.sort_by(|a, b| b.0.total_cmp(&a.0));
        let text = case["text"].as_str().unwrap();
        let (st, found) = s.call(
            "POST",
            "/v1/collections/c/search",
            Some(&json!({"query": {"text": text}, "target": "image", "k": 4, "explain": true})),
        );
        assert_eq!(st, 200, "{found}");
        let hits = found["hits"].as_array().unwrap();
        assert_eq!(hits.len(), images.len(), "{found}");
        // The reference's float order, where its scores are not within quantization noise.
        if expected[0].0 - expected[1].0 > 1e-3 {
            assert_eq!(
                hits[0]["id"], expected[0].1,
                "{text:?}: {expected:?} vs {found}"
            );
            checked += 1;
        }
        // The explanation: the shared terms, each impact product, summing to the score, the
        // strongest first, led by the term whose float weights multiply to the most.
        let hit = &hits[0];
        let id = hit["id"].as_str().unwrap();
        let doc = &images.iter().find(|(f, _)| f == id).unwrap().1;
        let explain = hit["explain"].as_array().unwrap();
        let shared = query.keys().filter(|t| doc.contains_key(*t)).count();
        assert!(explain.len() <= shared && !explain.is_empty(), "{hit}");
        let sum: u64 = explain
            .iter()
            .map(|t| t["contribution"].as_u64().unwrap())
            .sum();
        assert_eq!(hit["score"].as_f64().unwrap(), sum as f64);
        let contributions: Vec<u64> = explain
            .iter()
            .map(|t| t["contribution"].as_u64().unwrap())
            .collect();
        assert!(contributions.windows(2).all(|w| w[0] >= w[1]), "{hit}");
        let strongest = query
            .iter()
            .filter_map(|(t, w)| doc.get(t).map(|x| (w * x, t.as_str())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap();
        let first = explain[0]["term"].as_str().unwrap();
        let first_float = query[first] * doc[first];
        assert!(
            first == strongest.1 || (strongest.0 - first_float) / strongest.0 < 0.01,
            "{text:?}: the explanation leads with {first:?} ({first_float}), the strongest shared \
             term is {strongest:?}"
        );
    }
    assert!(checked >= 2, "only {checked} texts had a clear first image");
}

#[test]
fn hf_vdr_loads_from_the_cache_offline_with_its_base_models_tokenizer() {
    let home = tempfile::tempdir().unwrap();
    let vdr = fixtures().join("vdr-tiny");
    hf_cache_repo(
        home.path(),
        "vsearch/vdr-cross-modal",
        &[
            ("config.json", vdr.join("config.json")),
            ("pytorch_model.bin", vdr.join("pytorch_model.bin")),
        ],
    );
    let encode = |model: &str, extra: &[String]| {
        let mut args = strings(&[
            "encode",
            "--model",
            model,
            "--text",
            "a dog runs on the grass",
        ]);
        args.push("--json".into());
        args.extend_from_slice(extra);
        let out = lexlip_tests::lexlip_offline(home.path(), &args);
        (out.status.success(), out)
    };
    // Without bert-base-uncased's tokenizer anywhere: an error that says what to do.
    let (ok, out) = encode("hf:vsearch/vdr-cross-modal", &[]);
    assert!(!ok);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bert-base-uncased") && err.contains("tokenizer"),
        "{err}"
    );
    hf_cache_repo(
        home.path(),
        "bert-base-uncased",
        &[("tokenizer.json", splade_dir().join("tokenizer.json"))],
    );
    let (_, hub) = encode("hf:vsearch/vdr-cross-modal", &[]);
    let hub = success_json(&hub);
    let (_, local) = encode(vdr.to_str().unwrap(), &vdr_args()[2..]);
    let local = success_json(&local);
    assert_eq!(hub["terms"], local["terms"]);
    // Shown at the model's scale: hundreds of terms, not the handful floor(100·w) would keep.
    assert!(hub["terms"].as_object().unwrap().len() > 700, "{hub}");
}

/// A corpus of the fixture images with one caption each, as a TSV, a folder and a WebDataset
/// shard, in `dir`.
fn corpus(dir: &Path) {
    let captions = [
        "a dog runs on the grass",
        "a red car in the street",
        "two cats on a sofa",
        "a small boat near the water",
    ];
    let images = ["img0_64.png", "img1_64.png", "img2_64.png", "img3_96.png"];
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    let shard = std::fs::File::create(dir.join("shard-00000.tar")).unwrap();
    let mut tar = tar::Builder::new(shard);
    for (i, (image, caption)) in images.iter().zip(captions).enumerate() {
        let bytes = std::fs::read(fixtures().join("images").join(image)).unwrap();
        std::fs::write(dir.join("img").join(image), &bytes).unwrap();
        tsv.push_str(&format!("{caption}\timg/{image}\tp{i}\n"));
        let key = format!("{i:09}");
        let mut add = |name: String, data: &[u8]| {
            lexlip_pipeline::sources::webdataset::append_member(&mut tar, &name, data).unwrap()
        };
        add(format!("{key}.png"), &bytes);
        add(format!("{key}.txt"), caption.as_bytes());
        add(
            format!("{key}.json"),
            format!("{{\"key\": \"{key}\"}}").as_bytes(),
        );
    }
    tar.finish().unwrap();
    std::fs::write(dir.join("pairs.tsv"), tsv).unwrap();
}

fn run(args: &[String]) -> Value {
    let out = lexlip_tests::lexlip(args);
    success_json(&out)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Every command takes the published models as `--model`: `encode`, `index` (TSV, folder,
/// WebDataset), `search` (sparse; dense and hybrid where the model has a dense side) and
/// `eval`, at each model's own scale.
#[test]
fn every_command_takes_the_published_models() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    corpus(dir);
    let pair = dir.join("d2s-blip");
    let out = lexlip_tests::lexlip(&strings(&[
        "model",
        "pair",
        "--heads",
        fixtures().join("d2s-tiny").to_str().unwrap(),
        "--dense",
        fixtures().join("blip-tiny").to_str().unwrap(),
        "--tokenizer",
        splade_dir().join("tokenizer.json").to_str().unwrap(),
        "--out",
        pair.to_str().unwrap(),
    ]));
    lexlip_tests::assert_success(&out);
    let d2s = vec!["--model".to_string(), pair.display().to_string()];
    for (name, model, scale, dense) in [
        ("vdr", vdr_args(), 10_000.0, false),
        ("d2s", d2s, 100.0, true),
    ] {
        let image = dir.join("img/img1_64.png");
        let mut args = strings(&["encode", "--image", image.to_str().unwrap(), "--json"]);
        args.extend(model.clone());
        assert!(
            !run(&args)["terms"].as_object().unwrap().is_empty(),
            "{name}"
        );
        for (input, value) in [
            ("--tsv", dir.join("pairs.tsv")),
            ("--images", dir.join("img")),
            ("--webdataset", dir.join("shard-00000.tar")),
        ] {
            let collection = dir.join(format!("{name}{input}"));
            let mut args = strings(&["index", "--collection", collection.to_str().unwrap()]);
            args.extend([
                input.to_string(),
                value.display().to_string(),
                "--json".into(),
            ]);
            args.extend(model.clone());
            if dense {
                args.push("--dense".into());
            }
            let summary = run(&args);
            assert!(
                summary["indexed"].as_u64().unwrap() >= 4,
                "{name} {input}: {summary}"
            );
            let stats = run(&strings(&[
                "stats",
                "--collection",
                collection.to_str().unwrap(),
                "--json",
            ]));
            assert!(
                stats["nnz"].as_u64().unwrap() > 0,
                "{name} {input}: {stats}"
            );
        }
        let collection = dir.join(format!("{name}--tsv"));
        let modes: &[&str] = if dense {
            &["sparse", "dense", "hybrid"]
        } else {
            &["sparse"]
        };
        for mode in modes {
            let mut args = strings(&[
                "search",
                "--collection",
                collection.to_str().unwrap(),
                "--text",
                "a small boat near the water",
                "--mode",
                mode,
                "-k",
                "1",
                "--json",
            ]);
            args.extend(model.clone());
            let found = run(&args);
            let hits = found["hits"].as_array().unwrap();
            assert!(!hits.is_empty(), "{name} {mode}: {found}");
            assert_eq!(found["path"], *mode, "{name}: {found}");
            if *mode == "sparse" {
                assert!(hits[0]["match_strength"].is_number(), "{name}: {found}");
            }
        }
        let mut args = strings(&[
            "eval",
            "--tsv",
            dir.join("pairs.tsv").to_str().unwrap(),
            "--json",
        ]);
        args.extend(model.clone());
        let report = run(&args);
        assert_eq!(report["images"].as_u64(), Some(4), "{name}: {report}");
        assert!(
            report["settings"][0]["t2i.r@10"].is_number(),
            "{name}: {report}"
        );
        let info: Value =
            serde_json::from_str(&std::fs::read_to_string(collection.join("lexlip.json")).unwrap())
                .unwrap();
        assert_eq!(info["scale"].as_f64(), Some(scale), "{name}: {info}");
    }
}
