//! The models shipped in `models/emoji-tiny`, `models/emoji-lex` and
//! `models/emoji-lex-imagenet`, served as a user runs them (`lexlip serve --model
//! models/emoji-tiny`): text→image and image→text over twelve Noto emoji of their training
//! concepts, as users have them (transparent 64-px PNGs), put the right item near the top, and
//! every hit says which terms matched. `models/emoji-lex-compose` is checked through `lexlip eval` over pictures composed
//! of the same twelve emoji.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use lexlip_tests::{
    EMOJI, Server, assert_success, b64, emoji_model, emoji_png, hit_numbers, hit_scores, hits,
    index_emoji, lexlip, line, success_json,
};
use serde_json::{Value, json};

/// 1-based rank of `want` among the hits (`None`: not returned).
fn rank(r: &Value, want: &str) -> Option<usize> {
    hits(r).iter().position(|h| h["id"] == want).map(|p| p + 1)
}

struct Ranks(Vec<Option<usize>>);

impl Ranks {
    fn mrr(&self) -> f64 {
        let sum: f64 = self
            .0
            .iter()
            .map(|r| r.map_or(0.0, |r| 1.0 / r as f64))
            .sum();
        sum / self.0.len() as f64
    }
    fn within(&self, k: usize) -> usize {
        self.0.iter().filter(|r| r.is_some_and(|r| r <= k)).count()
    }
}

/// What a shipped model must reach on the twelve emoji: an MRR both ways, and how many of the
/// twelve it puts in the top 3. A random ranking of 12 items has MRR ≈ 0.26 and puts ~3 of 12
/// in the top 3.
struct Floor {
    mrr: f64,
    top3: usize,
    /// Whether "a dog" must match the dog face through the term `dog` itself (a model whose
    /// image lexicons name their neighbours more than the picture matches it through others).
    dog_by_name: bool,
    /// The most terms an image's lexicon may have (a model trained with top-K pooling).
    image_terms: Option<usize>,
}

#[test]
fn the_shipped_emoji_model_finds_emoji_by_text_and_text_by_emoji() {
    // Below what it measures (MRR 0.85 text→image, 0.90 image→text; 11 of 12 in the top 3 both
    // ways).
    finds_emoji_both_ways(
        &emoji_model(),
        Floor {
            mrr: 0.7,
            top3: 9,
            dog_by_name: true,
            image_terms: None,
        },
    );
}

#[test]
fn the_shipped_lexicon_heads_model_finds_emoji_with_64_terms_per_image() {
    let model = lexlip_tests::workspace().join("models/emoji-lex");
    // Below what it measures (MRR 0.90 text→image, 0.89 image→text; 11 of 12 in the top 3 both
    // ways). Its "a dog" → dog face is explained by `dog`, `animal`, `food`, `mammals`: the
    // caption-word likelihood put the caption's own words among the image's terms.
    finds_emoji_both_ways(
        &model,
        Floor {
            mrr: 0.75,
            top3: 10,
            dog_by_name: true,
            image_terms: Some(64),
        },
    );
}

#[test]
fn the_imagenet_lexicon_model_finds_emoji_with_64_terms_per_image() {
    let model = lexlip_tests::workspace().join("models/emoji-lex-imagenet");
    // Below what it measures (MRR 1.00 both ways: each of the twelve first, both ways). "a dog"
    // meets the dog face on `dog`, `animal`, `mammals` first.
    finds_emoji_both_ways(
        &model,
        Floor {
            mrr: 0.85,
            top3: 11,
            dog_by_name: true,
            image_terms: Some(64),
        },
    );
}

/// Serves `model` as a user runs it, over the twelve emoji; asserts `floor` both ways and that
/// "a dog" finds the dog face, explained by terms both lexicons carry (`dog` among them where
/// `floor` says so).
fn finds_emoji_both_ways(model: &Path, floor: Floor) {
    let data = tempfile::tempdir().unwrap();
    let s = Server::with_model(data.path(), model);
    index_emoji(&s, "emoji");

    let mut t2i = Ranks(Vec::new());
    let mut i2t = Ranks(Vec::new());
    for (file, label) in EMOJI {
        let (st, r) = s.call(
            "POST",
            "/v1/search/text-to-image",
            Some(&json!({"collection": "emoji", "text": label, "k": 12})),
        );
        assert_eq!(st, 200, "{r}");
        assert!(hits(&r).iter().all(|h| h["modality"] == "image"));
        t2i.0.push(rank(&r, file));
        let query = b64(&emoji_png(file));
        let (st, r) = s.call(
            "POST",
            "/v1/search/image-to-text",
            Some(&json!({"collection": "emoji", "image": query, "k": 12})),
        );
        assert_eq!(st, 200, "{r}");
        i2t.0.push(rank(&r, &format!("text:{file}")));
        if let Some(most) = floor.image_terms {
            let (st, enc) = s.call("POST", "/v1/encode", Some(&json!({"image": query})));
            assert_eq!(st, 200, "{enc}");
            let n = enc["impacts"].as_object().unwrap().len();
            assert!(n > 0 && n <= most, "{file}: {n} terms");
        }
    }
    eprintln!("text→image ranks {:?} (MRR {:.2})", t2i.0, t2i.mrr());
    eprintln!("image→text ranks {:?} (MRR {:.2})", i2t.0, i2t.mrr());
    assert!(
        t2i.mrr() >= floor.mrr && i2t.mrr() >= floor.mrr,
        "MRR below {}",
        floor.mrr
    );
    assert!(t2i.within(3) >= floor.top3 && i2t.within(3) >= floor.top3);

    // The hits explain themselves: the terms a query shares with its best image.
    let (_, r) = s.call(
        "POST",
        "/v1/collections/emoji/search",
        Some(&json!({"query": {"text": "a dog"}, "target": "image", "k": 3, "explain": true})),
    );
    let top = &r["hits"][0];
    let terms: Vec<&str> = top["explain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["term"].as_str().unwrap())
        .collect();
    eprintln!("'a dog' → {} via {terms:?}", top["id"]);
    assert_eq!(top["id"], "1f436", "{r}");
    assert!(!terms.is_empty(), "{r}");
    if floor.dog_by_name {
        assert!(terms.contains(&"dog"), "{r}");
    }
    s.stop();
}

/// A copy of `models/emoji-tiny` under `dir` whose `lexlip.json` also has `settings`' fields.
fn emoji_model_with(dir: &Path, settings: Value) -> std::path::PathBuf {
    let model = dir.join("model");
    for part in ["text", "image"] {
        std::fs::create_dir_all(model.join(part)).unwrap();
        for f in std::fs::read_dir(emoji_model().join(part)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, model.join(part).join(f.file_name().unwrap())).unwrap();
        }
    }
    // The parts share the model's tokenizer.json.
    std::fs::copy(
        emoji_model().join("tokenizer.json"),
        model.join("tokenizer.json"),
    )
    .unwrap();
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(emoji_model().join("lexlip.json")).unwrap())
            .unwrap();
    file.as_object_mut()
        .unwrap()
        .extend(settings.as_object().unwrap().clone());
    std::fs::write(model.join("lexlip.json"), file.to_string()).unwrap();
    model
}

/// A model's own IDF exponent (`"idf"` in its lexlip.json) weighs the text and image queries
/// it encodes when the search gives none: over HTTP a text query without `idf` scores as the
/// same query with the model's `"idf": 2`, not as the unweighted one, and `/readyz` says so;
/// vector queries, which no model encoded, stay unweighted; `lexlip serve --idf 0` overrides
/// the model. `lexlip search` and `lexlip eval` take it too, and a model whose idf is out of
/// range is refused with the file to fix.
#[test]
fn a_models_idf_weighs_its_queries_unless_the_search_gives_one() {
    let tmp = tempfile::tempdir().unwrap();
    let model = emoji_model_with(tmp.path(), json!({"idf": 2.0}));
    let data = tmp.path().join("data");
    let s = Server::with_model(&data, &model);
    index_emoji(&s, "emoji");
    let (_, ready) = s.call("GET", "/readyz", None);
    assert_eq!(
        ready["models"]["idf"],
        json!({"text": 2.0, "image": 2.0}),
        "{ready}"
    );
    let search = |s: &Server, extra: Value| {
        search_scores(
            s,
            json!({"query": {"text": "a dog"}, "target": "image", "k": 12}),
            extra,
        )
    };
    let by_model = search(&s, json!({}));
    let weighted = search(&s, json!({"idf": 2.0}));
    let plain = search(&s, json!({"idf": 0}));
    assert_eq!(by_model, weighted);
    assert_ne!(by_model, plain);
    let vector = |s: &Server, extra: Value| {
        search_scores(
            s,
            json!({"query": {"sparse": {"dog": 1.5, "animal": 0.5}}, "k": 12}),
            extra,
        )
    };
    assert_eq!(vector(&s, json!({})), vector(&s, json!({"idf": 0})));
    s.stop();

    let model_arg = model.display().to_string();
    let s = Server::start(
        &data,
        &["--model".into(), model_arg, "--idf".into(), "0".into()],
    );
    assert_eq!(search(&s, json!({})), plain);
    s.stop();

    // The command line: `lexlip search` without --idf weighs as the model asks.
    let collection = data.join("collections/emoji");
    let cli = |extra: &str| {
        let args = line(
            &format!("search --modality image -k 12 --json {extra}"),
            &[
                ("--collection", &collection),
                ("--model", &model),
                ("--text", &"a dog"),
            ],
        );
        hit_scores(&success_json(&lexlip(&args)))
    };
    assert_eq!(cli(""), by_model);
    assert_eq!(cli("--idf 0"), plain);

    // `lexlip eval` reports the exponent it searched with.
    let tsv = tmp.path().join("emoji.tsv");
    let mut lines = vec!["title\tfilepath\timage_id".to_string()];
    for (file, label) in EMOJI {
        lines.push(format!("{label}\t{}\t{file}", emoji_png(file).display()));
    }
    std::fs::write(&tsv, lines.join("\n")).unwrap();
    let eval = |extra: &str| {
        let args = line(
            &format!("eval {extra} --json"),
            &[("--tsv", &tsv), ("--model", &model)],
        );
        success_json(&lexlip(&args))
    };
    assert_eq!(eval("")["idf"], 2.0);
    assert!(eval("--idf 0").get("idf").is_none());

    // Out of range: refused at start, naming the file.
    let refused = |args: &[OsString], says: &[&str]| {
        let out = lexlip(args);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(says.iter().all(|w| err.contains(w)), "{err}");
    };
    let bad = emoji_model_with(&tmp.path().join("bad"), json!({"idf": 9.0}));
    let args = line(
        "search",
        &[
            ("--collection", &collection),
            ("--model", &bad),
            ("--text", &"a dog"),
        ],
    );
    refused(&args, &["lexlip.json", "idf must be"]);
    let negative = emoji_model_with(&tmp.path().join("negative"), json!({"idf": -1.0}));
    refused(
        &line("eval", &[("--tsv", &tsv), ("--model", &negative)]),
        &["idf in lexlip.json"],
    );
}

/// The scores of a search on `emoji` with `body`'s fields and then `extra`'s.
fn search_scores(s: &Server, mut body: Value, extra: Value) -> Vec<(String, f64)> {
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let (st, r) = s.call("POST", "/v1/collections/emoji/search", Some(&body));
    assert_eq!(st, 200, "{r}");
    hit_scores(&r)
}

/// Match strengths end to end with a real model: a caption query equal to a stored caption
/// matches it fully (strength 1, up to quantization), every hit's strength is in [0, 1], and a model carrying a
/// weak-match calibration in its lexlip.json has the server return it with text queries (the
/// search page's threshold) but not with vector queries, which no model encoded. A model's
/// typical query norm scales down the strengths of text queries lighter than it, exactly by
/// their squared share of it, over HTTP and in `lexlip search`; a norm that is no positive
/// number is refused.
#[test]
fn match_strength_and_a_models_weak_match_calibration() {
    let tmp = tempfile::tempdir().unwrap();
    let model = emoji_model_with(tmp.path(), json!({"weak_match": {"text": 0.05}}));
    let data = tmp.path().join("data");
    let s = Server::with_model(&data, &model);
    index_emoji(&s, "emoji");

    let search = |body: Value| {
        let (st, r) = s.call("POST", "/v1/collections/emoji/search", Some(&body));
        assert_eq!(st, 200, "{r}");
        r
    };
    // The caption "frog" against the texts: the stored caption "frog" is the query itself.
    let r = search(json!({"query": {"text": "frog"}, "target": "text", "k": 12}));
    assert_eq!(r["hits"][0]["id"], "text:1f438", "{r}");
    // (Encoded alone and in a batch, a weight can land on the other side of an impact step.)
    assert!(
        r["hits"][0]["match_strength"].as_f64().unwrap() >= 0.98,
        "{r}"
    );
    assert_eq!(r["weak_match"], 0.05);
    let r = search(json!({"query": {"text": "qwzx"}, "target": "image", "k": 12}));
    for h in r["hits"].as_array().unwrap() {
        let m = h["match_strength"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&m), "{h}");
    }
    assert_eq!(r["weak_match"], 0.05);
    let r = search(json!({"query": {"sparse": {"frog": 1.5}}, "k": 3}));
    assert!(r.get("weak_match").is_none(), "{r}");
    assert!(r["hits"][0]["match_strength"].as_f64().unwrap() > 0.0);

    // A typical query norm in lexlip.json: a text query lighter than it has every hit's
    // strength scaled by its squared share of it (its impacts, at the collection's scale 100,
    // are what /v1/encode shows for the collection); vector queries keep theirs.
    let strengths = |r: &Value| hit_numbers(r, "match_strength");
    let queries = [
        json!({"query": {"text": "frog"}, "target": "text", "k": 12}),
        json!({"query": {"text": "qwzx"}, "target": "image", "k": 12}),
        json!({"query": {"sparse": {"frog": 1.5}}, "k": 3}),
    ];
    let before: Vec<Vec<f64>> = queries
        .iter()
        .map(|q| strengths(&search(q.clone())))
        .collect();
    let squared_norm = |text: &str| -> f64 {
        let body = json!({"text": text, "collection": "emoji"});
        let (st, r) = s.call("POST", "/v1/encode", Some(&body));
        assert_eq!(st, 200, "{r}");
        let impacts = r["impacts"].as_object().unwrap();
        impacts
            .values()
            .map(|i| i.as_f64().unwrap().powi(2))
            .sum::<f64>()
            / 100f64.powi(2)
    };
    let own = [squared_norm("frog"), squared_norm("qwzx")];
    s.stop();
    let norm = 2.0 * own.iter().copied().fold(0.0, f64::max).sqrt();
    let model = emoji_model_with(
        &tmp.path().join("normed"),
        json!({"weak_match": {"text": 0.05}, "query_norm": {"text": norm}}),
    );
    let s = Server::with_model(&data, &model);
    let (_, ready) = s.call("GET", "/readyz", None);
    let shown = ready["models"]["query_norm"]["text"].as_f64();
    assert_eq!(shown.map(|n| n as f32), Some(norm as f32), "{ready}");
    let search = |body: Value| {
        let (st, r) = s.call("POST", "/v1/collections/emoji/search", Some(&body));
        assert_eq!(st, 200, "{r}");
        r
    };
    let norm = f64::from(norm as f32);
    let mut served = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let after = strengths(&search(q.clone()));
        served.push(after.clone());
        let factor = own.get(i).map_or(1.0, |o| (o / norm.powi(2)).min(1.0));
        assert!(factor < 1.0 || i == 2);
        assert_eq!(after.len(), before[i].len(), "{q}");
        for (a, b) in after.iter().zip(&before[i]) {
            assert!(
                (a - b * factor).abs() < 1e-9,
                "{q}: {a} against {b} · {factor}"
            );
        }
    }
    s.stop();
    // `lexlip search` gives the strengths the server gives.
    let collection = data.join("collections/emoji");
    let args = line(
        "search --modality image -k 12 --json",
        &[
            ("--collection", &collection),
            ("--model", &model),
            ("--text", &"qwzx"),
        ],
    );
    let cli = success_json(&lexlip(&args));
    assert_eq!(strengths(&cli), served[1], "{cli}");
    // A norm that is no positive number is refused when the model loads, naming the file.
    let bad = emoji_model_with(&tmp.path().join("bad"), json!({"query_norm": {"text": 0}}));
    let out = lexlip(&line("encode --text x", &[("--model", &bad)]));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("query_norm in lexlip.json"), "{err}");
}

/// `models/emoji-lex-compose`, the model for pictures of several things: over pictures that
/// `lexlip bench compose` makes of the twelve emoji (1-4 per picture, scaled, turned, tinted, as
/// the image workload makes them), each caption finds its own picture among the first five
/// far more often than with `models/emoji-lex`, which only saw single pictures.
#[test]
fn the_composed_picture_model_finds_pictures_of_several_emoji_by_their_names() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = tmp.path().join("shards");
    lexlip_tests::compose_shards(
        &tmp.path().join("sources.jsonl"),
        EMOJI.map(|(file, label)| (emoji_png(file), label.to_string())),
        &shards,
        "--images 40 --seed 5",
    );
    // Recall at 5 of the exact search, text→image and image→text.
    let recall_at_5 = |model: &str| -> (f64, f64) {
        let model = lexlip_tests::workspace().join(model);
        let report = lexlip_tests::lexlip_json(&line(
            "eval --json",
            &[("--webdataset", &shards), ("--model", &model)],
        ));
        assert_eq!(report["images"], 40, "{report}");
        let exact = &report["settings"][0];
        eprintln!("{}: {exact}", model.display());
        let r = |key: &str| exact[key].as_f64().unwrap();
        (r("t2i.r@5"), r("i2t.r@5"))
    };
    let compose = recall_at_5("models/emoji-lex-compose");
    let single = recall_at_5("models/emoji-lex");
    // Measured: 0.625 / 0.625 against 0.25 / 0.25; a random ranking gets 5 of 40 (0.125).
    assert!(compose.0 >= 0.5 && compose.1 >= 0.4, "{compose:?}");
    assert!(
        compose.0 > single.0 && compose.1 > single.1,
        "{compose:?} vs {single:?}"
    );
}

/// A heads model's lexicons are a function of its backbone's embeddings:
/// `encode_embeddings` of the dense vectors `encode_with_dense` gives equals the lexicons
/// encoded from the pixels and the texts (what `lexlip eval --distractors-from-dense` relies
/// on), and both equal the plain tensor path (`pooled`, then `to_sparse`) that the fused host
/// path replaces. An encoder that reads pixels has no such function.
#[test]
fn heads_lexicons_of_stored_embeddings_equal_the_encoded_ones() {
    use lexlip_model::{Device, Encoders};
    let model = lexlip_tests::workspace().join("models/emoji-lex-compose");
    let enc = Encoders::load(&model, &Device::Cpu).unwrap();
    let (image, text) = (enc.image().unwrap(), enc.text().unwrap());
    let pictures: Vec<_> = EMOJI
        .iter()
        .map(|(file, _)| {
            image
                .preprocess(&std::fs::read(emoji_png(file)).unwrap())
                .unwrap()
        })
        .collect();
    let (lexicons, dense) = image.encode_with_dense(&pictures).unwrap();
    let dense = dense.expect("heads give their embeddings");
    assert_eq!(image.encode_embeddings(&dense).unwrap(), lexicons);
    let plain = |p, vocab| lexlip_model::pooling::to_sparse(&p, vocab).unwrap();
    assert_eq!(
        plain(image.pooled(&pictures).unwrap(), image.vocabulary()),
        lexicons
    );
    assert!(lexicons.iter().all(|l| !l.is_empty() && l.len() <= 64));
    let captions: Vec<&str> = EMOJI.iter().map(|(_, label)| *label).collect();
    let embeddings = enc.dense().unwrap().encode_texts(&captions).unwrap();
    let encoded = text.encode(&captions).unwrap();
    assert_eq!(text.encode_embeddings(&embeddings).unwrap(), encoded);
    assert_eq!(
        plain(text.pooled(&captions).unwrap(), text.vocabulary()),
        encoded
    );
    let pixels = Encoders::load(&emoji_model(), &Device::Cpu).unwrap();
    let err = pixels
        .image()
        .unwrap()
        .encode_embeddings(&dense)
        .unwrap_err();
    assert!(err.to_string().contains("reads pixels"), "{err}");
}

/// Weak matches for image queries (issue 73): a model's `weak_match.image` comes back with an
/// image query's hits, from the server and from `lexlip search` (text and `--json`), and
/// `weak` judges the list by its first hit: all hits weak or none. Three pictures: one equal to a stored picture (strength
/// ~1, never weak), one of the collection's concepts against its labels (an ordinary query),
/// and one against a collection whose one document shares no term with it (no hit to
/// trust: none is returned). Vector queries, which no model encoded, get no calibration.
#[test]
fn image_queries_are_flagged_weak_by_the_models_calibration() {
    const WEAK: f64 = 0.5;
    let tmp = tempfile::tempdir().unwrap();
    let model = emoji_model_with(tmp.path(), json!({"weak_match": {"image": WEAK}}));
    let data = tmp.path().join("data");
    let s = Server::with_model(&data, &model);
    index_emoji(&s, "emoji");
    let (_, ready) = s.call("GET", "/readyz", None);
    assert_eq!(ready["models"]["weak_match"]["image"], WEAK, "{ready}");
    let search = |collection: &str, body: Value| {
        let path = format!("/v1/collections/{collection}/search");
        let (st, r) = s.call("POST", &path, Some(&body));
        assert_eq!(st, 200, "{r}");
        r
    };
    let frog = b64(&emoji_png("1f438"));
    // Equal to a stored picture: itself first, at full strength.
    let r = search(
        "emoji",
        json!({"query": {"image": frog}, "target": "image", "k": 3}),
    );
    assert_eq!(r["hits"][0]["id"], "1f438", "{r}");
    assert!(
        r["hits"][0]["match_strength"].as_f64().unwrap() >= 0.98,
        "{r}"
    );
    assert_eq!(r["weak_match"], WEAK, "{r}");
    assert_eq!(r["weak"], false, "{r}");
    // A text query has no calibration of this model's.
    let r = search("emoji", json!({"query": {"text": "frog"}, "k": 3}));
    assert!(r.get("weak_match").is_none(), "{r}");
    assert!(r.get("weak").is_none(), "{r}");
    // Sharing no term: a collection whose only document holds a word the picture lacks.
    let (st, enc) = s.call("POST", "/v1/encode", Some(&json!({"image": frog})));
    assert_eq!(st, 200, "{enc}");
    let lacking = ["quartz", "violin", "tuesday", "glacier"]
        .into_iter()
        .find(|w| enc["terms"].get(*w).is_none())
        .expect("a word the frog's lexicon lacks");
    s.create("apart", json!({}));
    s.add(
        "apart",
        vec![json!({"id": "t", "modality": "text", "vector": {lacking: 1.0}})],
    );
    let r = search("apart", json!({"query": {"image": frog}, "k": 3}));
    assert_eq!(r["hits"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["weak_match"], WEAK, "{r}");
    assert_eq!(r["weak"], true, "nothing matched: {r}");
    s.stop();

    // `lexlip search --image`: an ordinary picture against the labels; the JSON carries the
    // calibration and the list's flag, and the text output flags every hit or none.
    let collection = data.join("collections/emoji");
    let dog = emoji_png("1f436");
    let cli = |collection: &Path, words: &str, query: (&str, &dyn AsRef<OsStr>)| {
        let args = line(
            &format!("search {words}"),
            &[("--collection", &collection), ("--model", &model), query],
        );
        lexlip(&args)
    };
    let image_cli = |collection: &Path, words: &str| cli(collection, words, ("--image", &dog));
    let json_out = success_json(&image_cli(&collection, "--modality text -k 12 --json"));
    assert_eq!(json_out["weak_match"], WEAK, "{json_out}");
    let strengths = hit_numbers(&json_out, "match_strength");
    assert!(!strengths.is_empty());
    let weak = strengths[0] < WEAK;
    assert_eq!(json_out["weak"], weak, "{json_out}");
    let out = image_cli(&collection, "--modality text -k 12");
    assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("score")).collect();
    assert_eq!(lines.len(), strengths.len(), "{text}");
    for line in &lines {
        assert_eq!(
            line.contains(", weak"),
            weak,
            "{line} (best {})",
            strengths[0]
        );
    }
    // The image query's default target is the collection's texts (it holds them), a text
    // query's its pictures; `--modality any` returns both.
    let default = success_json(&image_cli(&collection, "-k 12 --json"));
    assert_eq!(default["hits"], json_out["hits"], "{default}");
    let modalities = |extra: &str| -> Vec<String> {
        let words = format!("-k 30 --json {extra}");
        let out = success_json(&cli(&collection, &words, ("--text", &"a green frog")));
        hits(&out)
            .iter()
            .map(|h| h["modality"].as_str().unwrap().to_string())
            .collect()
    };
    let images = modalities("");
    assert!(
        !images.is_empty() && images.iter().all(|m| m == "image"),
        "{images:?}"
    );
    let any = modalities("--modality any");
    assert!(any.iter().any(|m| m == "text"), "{any:?}");
    // Nothing shared: the list is weak, in the JSON too.
    let apart = data.join("collections/apart");
    let out = success_json(&image_cli(&apart, "--modality text -k 12 --json"));
    assert_eq!(out["hits"].as_array().unwrap().len(), 0, "{out}");
    assert_eq!(out["weak"], true, "{out}");
}

/// Expansion control from a model's lexlip.json (issue 73): "a red car emoji" keeps its own
/// content words and at most two others; "a" is a function word and "emoji", a template word
/// the vocabulary splits ("em", "##oj", "##i"), weighs in none of its pieces. Without the
/// rule the same model weighs many more terms; `--query-expansion` on the command line
/// overrides the file's E and keeps its template words.
#[test]
fn expansion_control_keeps_a_querys_own_words() {
    let tmp = tempfile::tempdir().unwrap();
    let settings = json!({"text_terms": {"expansion": 2, "ignore": ["emoji"]}});
    let model = emoji_model_with(tmp.path(), settings);
    let terms = |model: &Path, extra: &str| -> Vec<String> {
        let args = line(
            &format!("encode {extra} --json"),
            &[("--model", &model), ("--text", &"a red car emoji")],
        );
        let r = success_json(&lexlip(&args));
        r["terms"].as_object().unwrap().keys().cloned().collect()
    };
    let all = terms(&emoji_model(), "");
    let cut = terms(&model, "");
    assert!(all.len() > 6, "{all:?}");
    for w in ["red", "car"] {
        assert!(cut.contains(&w.to_string()), "{cut:?}");
    }
    let others = cut.iter().filter(|t| *t != "red" && *t != "car").count();
    assert!(others <= 2, "{cut:?}");
    for piece in ["a", "em", "##oj", "##i"] {
        assert!(!cut.contains(&piece.to_string()), "{piece} in {cut:?}");
    }
    let none = terms(&model, "--query-expansion 0");
    assert_eq!(
        none.iter().filter(|t| *t != "red" && *t != "car").count(),
        0,
        "{none:?}"
    );

    // Served: the same text stored as a document keeps every term the model weighs (the cut
    // is the query's), and searching with it finds it through its own words.
    let data = tmp.path().join("data");
    let s = Server::with_model(&data, &model);
    s.create("t", json!({}));
    s.add("t", vec![json!({"id": "car", "text": "a red car emoji"})]);
    let (st, r) = s.call("GET", "/v1/collections/t/documents/car?explain=true", None);
    assert_eq!(st, 200, "{r}");
    let stored = r["terms"].as_array().expect("terms").len();
    assert!(
        stored > cut.len(),
        "stored {stored} terms, query {cut:?}: {r}"
    );
    let (st, r) = s.call(
        "POST",
        "/v1/collections/t/search",
        Some(&json!({"query": {"text": "a red car emoji"}, "k": 1, "explain": true})),
    );
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["hits"][0]["id"], "car", "{r}");
    s.stop();
}

/// The model card: Markdown for API clients, a rendered page for a browser (the page's "how
/// it was made" link), with HTML written in the card shown as text.
#[test]
fn the_model_card_is_rendered_for_a_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let model = emoji_model_with(tmp.path(), json!({}));
    let card = "# A test card\n\n| split | R@1 |\n|---|---|\n| test | 12.8 |\n\n<b>bold?</b>\n";
    std::fs::write(model.join("README.md"), card).unwrap();
    let s = Server::with_model(&tmp.path().join("data"), &model);
    let (st, markdown) = s.call("GET", "/v1/model/readme", None);
    assert_eq!((st, markdown.as_str()), (200, Some(card)));
    let (st, page) = s.call_with(
        "GET",
        "/v1/model/readme",
        None,
        &[("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")],
    );
    assert_eq!(st, 200);
    let page = page.as_str().unwrap();
    assert!(page.contains("<h1>A test card</h1>"), "{page}");
    assert!(page.contains("<td>12.8</td>"), "{page}");
    assert!(page.contains("&lt;b&gt;bold?&lt;/b&gt;"), "{page}");
    s.stop();
}

/// Pictures beside the twelve: the four queries the demo's model once missed ("pizza" 38th,
/// "rocket" not returned, "a red car" 188th, "birthday cake" 3rd) and neighbours that could
/// take their place (other food, cakes, space, cars). `tests/fixtures/emoji`.
const NEIGHBOURS: [(&str, &str); 13] = [
    ("1f355", "pizza"),
    ("1f35d", "spaghetti"),
    ("1f354", "hamburger"),
    ("1f382", "birthday cake"),
    ("1f370", "shortcake"),
    ("1f9c1", "cupcake"),
    ("1f680", "rocket"),
    ("1f9d1-200d-1f680", "astronaut"),
    ("1f6f8", "flying saucer"),
    ("1f3ce-fe0f", "racing car"),
    ("1f693", "police car"),
    ("1f695", "taxi"),
    ("1f699", "sport utility vehicle"),
];

/// What the demo's model must reach among the 25 pictures (measured 2026-12-06, heads trained
/// with hard in-batch negatives, colour words, man / woman / person / flag grounded and the
/// own-word floor on every concept of the demo: the four queries first, "rocket" too, which was
/// 2nd after the astronaut, whose picture holds a rocket, before the floor; all 25 labels first).
const MISSED_WITHIN: usize = 1;
const MISSED_FIRST: usize = 4;
const MIN_LABELS_FIRST: usize = 25;

/// The demo's model (`lexlip demo`'s default), served as the demo serves it: the four queries
/// the demo once missed at the top among their neighbours, and the pictures' own labels first.
#[test]
fn the_demos_model_ranks_the_queries_it_missed_at_the_top() {
    let model = lexlip_tests::workspace().join("models/emoji-lex-imagenet");
    let data = tempfile::tempdir().unwrap();
    let s = Server::with_model(data.path(), &model);
    s.create("demo", json!({}));
    let all: Vec<(&str, &str)> = EMOJI.iter().chain(NEIGHBOURS.iter()).copied().collect();
    let docs: Vec<Value> = all
        .iter()
        .map(|(file, _)| json!({"id": file, "image": b64(&emoji_png(file))}))
        .collect();
    s.add("demo", docs);
    let first = |text: &str| {
        let (st, r) = s.call(
            "POST",
            "/v1/collections/demo/search",
            Some(&json!({"query": {"text": text}, "k": 25})),
        );
        assert_eq!(st, 200, "{r}");
        r
    };
    let missed: Vec<(&str, Option<usize>)> = [
        ("pizza", "1f355"),
        ("rocket", "1f680"),
        ("a red car", "1f697"),
        ("birthday cake", "1f382"),
    ]
    .into_iter()
    .map(|(text, want)| (text, rank(&first(text), want)))
    .collect();
    eprintln!("the queries the demo missed: {missed:?}");
    for (text, at) in &missed {
        assert!(at.is_some_and(|r| r <= MISSED_WITHIN), "{text}: {missed:?}");
    }
    assert!(
        missed.iter().filter(|(_, at)| *at == Some(1)).count() >= MISSED_FIRST,
        "{missed:?}"
    );
    let ranks = Ranks(
        all.iter()
            .map(|(file, label)| rank(&first(label), file))
            .collect(),
    );
    eprintln!(
        "labels → pictures: ranks {:?} (MRR {:.2})",
        ranks.0,
        ranks.mrr()
    );
    assert!(ranks.within(1) >= MIN_LABELS_FIRST, "{:?}", ranks.0);
    s.stop();
}

/// Stored captions keep their own words (issue 73): the demo's model weighs the "3" of "keycap:
/// 3" next to nothing (its plain lexicon, the head's 32 strongest terms, has none), so with
/// `document_floor` a stored caption lifts it to half its strongest own word, as the query
/// does, and keeps the head's 32 terms besides, where a query keeps its own words and at most
/// 10 others. Served, the stored document explains with it.
#[test]
fn the_demos_model_lifts_a_stored_captions_weak_words() {
    use lexlip_model::{Device, Encoders};
    let model = lexlip_tests::workspace().join("models/emoji-lex-imagenet");
    let enc = Encoders::load(&model, &Device::Cpu).unwrap();
    let text = enc.text().unwrap();
    let caption = "keycap: 3";
    let plain =
        lexlip_model::pooling::to_sparse(&text.pooled(&[caption]).unwrap(), text.vocabulary())
            .unwrap()
            .remove(0);
    let key = plain.get("key").expect("its strongest own word");
    assert_eq!(plain.get("3"), None, "{plain:?}");
    let stored = text.encode(&[caption]).unwrap().remove(0);
    let query = text.encode_queries(&[caption]).unwrap().remove(0);
    for (what, v) in [("stored", &stored), ("query", &query)] {
        assert_eq!(v.get("key"), Some(key), "{what}: {v:?}");
        assert!(
            v.get("3").is_some_and(|w| w >= 0.5 * key - 1e-6),
            "{what}: {v:?}"
        );
    }
    assert_eq!(stored.len(), plain.len() + 1, "{stored:?}");
    assert!(query.len() <= 12, "{query:?}");

    let data = tempfile::tempdir().unwrap();
    let s = Server::with_model(data.path(), &model);
    s.create("labels", json!({}));
    s.add("labels", vec![json!({"id": "keycap-3", "text": caption})]);
    let (st, r) = s.call(
        "GET",
        "/v1/collections/labels/documents/keycap-3?explain=true",
        None,
    );
    assert_eq!(st, 200, "{r}");
    let terms = r["terms"].as_array().expect("terms");
    assert!(terms.iter().any(|t| t[0] == "3"), "{r}");
    s.stop();
}
