//! `lexlip eval` with the real binary: its recalls and non-zeros equal an oracle computed here by
//! brute-force dot products over `lexlip encode --json` outputs (sparse: the tiny LexLIP
//! checkpoint, quantized with scale 100 and cut to each top-K; dense: the tiny CLIP), a case
//! whose answer is obvious, and bad inputs.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use lexlip_tests::{Flags, fixtures, lexlip, lexlip_json, lexlip_tiny_args, line, png, splade_dir};
use serde_json::Value;

const WORDS: &[&str] = &[
    "dog", "cat", "red", "car", "grass", "man", "woman", "table", "street", "blue", "ball", "tree",
];

/// A TSV corpus of `images` generated PNGs with `captions` captions each; image `missing`
/// (if any) has rows but no file.
struct Corpus {
    tsv: PathBuf,
    /// (path, id) of each image row group.
    images: Vec<(PathBuf, String)>,
    /// (caption, image position).
    captions: Vec<(String, usize)>,
}

fn corpus(dir: &Path, images: usize, captions: usize, missing: Option<usize>) -> Corpus {
    corpus_from(dir, 0, images, captions, missing)
}

/// [`corpus`] of images `first..first + images` (the same image number makes the same picture
/// and captions in any corpus).
fn corpus_from(
    dir: &Path,
    first: usize,
    images: usize,
    captions: usize,
    missing: Option<usize>,
) -> Corpus {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    let mut out = Corpus {
        tsv: dir.join("test.tsv"),
        images: Vec::new(),
        captions: Vec::new(),
    };
    for i in first..first + images {
        let rel = format!("img/{i}.png");
        if missing != Some(i) {
            std::fs::write(dir.join(&rel), png(i as u32 * 7 + 1, 32)).unwrap();
        }
        let id = format!("im{i}");
        for j in 0..captions {
            let n = WORDS.len();
            let text = format!(
                "a {} {} with a {}",
                WORDS[(i + j) % n],
                WORDS[(3 * i + 5 * j + 1) % n],
                WORDS[(7 * i + j + 2) % n]
            );
            tsv.push_str(&format!("{text}\t{rel}\t{id}\n"));
            out.captions.push((text, i));
        }
        out.images.push((dir.join(&rel), id));
    }
    std::fs::write(&out.tsv, tsv).unwrap();
    out
}

/// `lexlip eval WORDS FLAGS` with the `model` flags: every evaluation's command line here (the
/// input is one of the flags: `--tsv`, `--webdataset`, `--collection`).
fn eval_line(model: &[String], words: &str, flags: &Flags) -> Vec<OsString> {
    let mut args = line(&format!("eval {words}"), flags);
    args.extend(model.iter().map(OsString::from));
    args
}

/// `lexlip eval --tsv CORPUS WORDS FLAGS --json` with the `model` flags; its report.
fn eval(model: &[String], corpus: &Path, words: &str, flags: &Flags) -> Value {
    let mut args = eval_line(model, &format!("{words} --json"), &[("--tsv", &corpus)]);
    args.extend(line("", flags));
    lexlip_json(&args)
}

/// `lexlip encode --json` of one text or image (`what`) with the `model` flags.
fn encode(model: &[String], what: &Flags) -> Value {
    let mut args = line("encode --json", what);
    args.extend(model.iter().map(OsString::from));
    lexlip_json(&args)
}

/// The impacts a collection with scale 100 stores: floor(100·w) in f32, zeros dropped.
fn impacts(terms: &Value) -> BTreeMap<String, u64> {
    terms
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(t, w)| {
            let impact = (w.as_f64().unwrap() as f32 * 100f32).floor();
            (impact >= 1.0).then(|| (t.clone(), impact as u64))
        })
        .collect()
}

/// The K largest impacts (ties: the smaller term first).
fn cut(v: &BTreeMap<String, u64>, k: Option<usize>) -> BTreeMap<String, u64> {
    let mut by_impact: Vec<(&String, &u64)> = v.iter().collect();
    by_impact.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    by_impact
        .into_iter()
        .take(k.unwrap_or(usize::MAX))
        .map(|(t, i)| (t.clone(), *i))
        .collect()
}

fn dot(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> f64 {
    a.iter()
        .filter_map(|(t, x)| b.get(t).map(|y| (x * y) as f64))
        .sum()
}

/// The tiny CLIP.
fn clip_dir() -> PathBuf {
    fixtures().join("clip-tiny")
}

/// The tiny CLIP's `--model` arguments.
fn clip_args() -> Vec<String> {
    model_flag(&clip_dir())
}

/// `--model DIR`, as the `model` arguments of [`eval`] and [`encode`].
fn model_flag(dir: &Path) -> Vec<String> {
    vec!["--model".to_string(), dir.display().to_string()]
}

/// `lexlip index --collection dir --tsv tsv` with `model`, `words` and `flags`, which must
/// succeed.
fn index_tsv(dir: &Path, tsv: &Path, model: &[String], words: &str, flags: &Flags) {
    let mut args = line(
        &format!("index {words}"),
        &[("--collection", &dir), ("--tsv", &tsv)],
    );
    args.extend(line("", flags));
    args.extend(model.iter().map(OsString::from));
    lexlip_tests::assert_success(&lexlip(&args));
}

/// A dense vector of `lexlip encode --json`, made unit length.
fn unit(v: &Value) -> Vec<f64> {
    let v: Vec<f64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    v.into_iter().map(|x| x / n).collect()
}

fn cos(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `score(query, document)` of every query and document.
fn scores<T>(queries: &[T], docs: &[T], score: impl Fn(&T, &T) -> f64) -> Vec<Vec<f64>> {
    queries
        .iter()
        .map(|q| docs.iter().map(|d| score(q, d)).collect())
        .collect()
}

/// The answers of each query of `c`: text → image, the caption's own image; image → text, the
/// image's captions.
fn relevant(c: &Corpus) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let t2i = c.captions.iter().map(|(_, i)| vec![*i]).collect();
    let i2t = (0..c.images.len())
        .map(|i| {
            (0..c.captions.len())
                .filter(|t| c.captions[*t].1 == i)
                .collect()
        })
        .collect();
    (t2i, i2t)
}

/// `a` then `b`.
fn joined<T: Clone>(a: &[T], b: &[T]) -> Vec<T> {
    a.iter().chain(b).cloned().collect()
}

/// For R@1, R@5, R@10 of a set of queries: how many are found for sure and how many may be
/// found, depending on how ties (scores within `eps`) are ordered. `scores[q][d]`: query q,
/// candidate d; `relevant[q]`: q's answers. Candidates scoring 0 are not returned (sparse).
fn oracle(
    scores: &[Vec<f64>],
    relevant: &[Vec<usize>],
    eps: f64,
    zero_is_miss: bool,
) -> [(usize, usize); 3] {
    let mut out = [(0, 0); 3];
    for (q, row) in scores.iter().enumerate() {
        let best = relevant[q]
            .iter()
            .map(|d| row[*d])
            .fold(f64::NEG_INFINITY, f64::max);
        if zero_is_miss && best <= 0.0 {
            continue;
        }
        let others = (0..row.len()).filter(|d| !relevant[q].contains(d));
        let (mut above, mut tied) = (0, 0);
        for d in others {
            if row[d] > best + eps {
                above += 1;
            } else if row[d] >= best - eps {
                tied += 1;
            }
        }
        for (slot, k) in out.iter_mut().zip([1, 5, 10]) {
            slot.0 += usize::from(above + tied < k);
            slot.1 += usize::from(above < k);
        }
    }
    out
}

/// The candidates of `scores` (one query's row) that a sparse search returns first, best first,
/// at most 10: those scoring above 0. None when a tie straddles the tenth place.
fn first_ten(scores: &[f64]) -> Option<Vec<usize>> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&d| scores[d] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    if order.len() > 10 && scores[order[9]] == scores[order[10]] {
        return None;
    }
    order.truncate(10);
    Some(order)
}

/// The engine's counts (recall × queries) lie within the oracle's bounds.
fn check(report: &Value, dir: &str, bounds: [(usize, usize); 3], queries: usize) -> usize {
    let mut ambiguous = 0;
    for ((lo, hi), k) in bounds.into_iter().zip([1, 5, 10]) {
        let r = report[format!("{dir}.r@{k}")].as_f64().unwrap();
        let found = (r * queries as f64).round() as usize;
        assert!(
            (lo..=hi).contains(&found),
            "{dir} R@{k}: the engine found {found} of {queries}, the oracle {lo}..={hi}: {report}"
        );
        ambiguous += hi - lo;
    }
    ambiguous
}

fn texts_and_images(model: &[String], c: &Corpus, key: &str) -> (Vec<Value>, Vec<Value>) {
    let texts = c
        .captions
        .iter()
        .map(|(t, _)| encode(model, &[("--text", t)])[key].clone())
        .collect();
    let images = c
        .images
        .iter()
        .map(|(p, _)| encode(model, &[("--image", p)])[key].clone())
        .collect();
    (texts, images)
}

#[test]
fn sparse_sweep_equals_brute_force_over_encode_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path(), 6, 2, None);
    let model = lexlip_tiny_args();
    let plot = tmp.path().join("sweep.svg");
    // `--term-cut`: a cut too small to leave any term out: each collection's exact search
    // again, through the approximate path.
    let report = eval(
        &model,
        &c.tsv,
        "--top-k 16,4 --term-cut 0.000001 --batch-size 4",
        &[("--plot", &plot)],
    );
    assert_eq!(report["images"], 6, "{report}");
    assert_eq!(report["captions"], 12);
    assert_eq!(report["t2i_queries"], 12);
    assert_eq!(report["i2t_queries"], 6);
    assert_eq!(report["mode"], "sparse");
    assert!(
        report["model"]
            .as_str()
            .unwrap()
            .ends_with("lexlip-tiny.ckpt")
    );
    assert!(report["corpus"].as_str().unwrap().ends_with("test.tsv"));
    assert!(report["encode_seconds"].as_f64().unwrap() > 0.0);
    let all = report["settings"].as_array().unwrap();
    let ks: Vec<(Value, Value)> = all
        .iter()
        .map(|s| (s["top_k"].clone(), s["search"].clone()))
        .collect();
    let (exact, approx) = (Value::from("exact"), Value::from("approx"));
    assert_eq!(
        ks,
        [
            (Value::Null, exact.clone()),
            (Value::Null, approx.clone()),
            (16.into(), exact.clone()),
            (16.into(), approx.clone()),
            (4.into(), exact),
            (4.into(), approx),
        ]
    );
    // Each collection's cut setting finds what its exact search finds: its overlap is
    // measured against that search (a top-4 cut against the top-4 exact search, not the full
    // vectors', which top-4 documents lose some of, below).
    for pair in all.chunks(2) {
        for dir in ["t2i", "i2t"] {
            for k in [1, 5, 10] {
                let key = format!("{dir}.r@{k}");
                assert_eq!(pair[1][&key], pair[0][&key], "{key}: {}", pair[1]);
            }
            assert_eq!(pair[1][format!("{dir}.overlap@10")], 1.0, "{}", pair[1]);
        }
    }
    let settings: Vec<Value> = all.iter().step_by(2).cloned().collect();

    let (texts, images) = texts_and_images(&model, &c, "terms");
    let texts: Vec<_> = texts.iter().map(impacts).collect();
    let images: Vec<_> = images.iter().map(impacts).collect();
    let (t2i_relevant, i2t_relevant) = relevant(&c);
    let mut ambiguous = 0;
    // Each setting's brute-force first 10 per query (None where a tie straddles the cut).
    let mut firsts: Vec<[Vec<Option<Vec<usize>>>; 2]> = Vec::new();
    for (s, k) in settings.iter().zip([None, Some(16), Some(4)]) {
        // Documents are cut; queries are not.
        let image_docs: Vec<_> = images.iter().map(|v| cut(v, k)).collect();
        let text_docs: Vec<_> = texts.iter().map(|v| cut(v, k)).collect();
        let t2i = scores(&texts, &image_docs, dot);
        ambiguous += check(s, "t2i", oracle(&t2i, &t2i_relevant, 0.0, true), 12);
        let i2t = scores(&images, &text_docs, dot);
        ambiguous += check(s, "i2t", oracle(&i2t, &i2t_relevant, 0.0, true), 6);
        firsts.push([
            t2i.iter().map(|r| first_ten(r)).collect(),
            i2t.iter().map(|r| first_ten(r)).collect(),
        ]);
        // Non-zeros stored per image, per text and per item.
        let nnz = |docs: &[BTreeMap<String, u64>]| docs.iter().map(|d| d.len()).sum::<usize>();
        let (ni, nt) = (nnz(&image_docs), nnz(&text_docs));
        let close = |key: &str, want: f64| {
            let got = s[key].as_f64().unwrap();
            assert!((got - want).abs() < 1e-9, "{key}: {got} != {want}: {s}");
        };
        close("nnz_per_image", ni as f64 / 6.0);
        close("nnz_per_text", nt as f64 / 12.0);
        close("nnz_per_item", (ni + nt) as f64 / 18.0);
        for key in ["bytes_per_item", "qps"] {
            assert!(s[key].as_f64().unwrap() > 0.0, "{key}: {s}");
        }
    }
    // The cut is real: top-4 documents hold 4 terms at most, fewer than the full vectors.
    assert!(settings[2]["nnz_per_image"].as_f64().unwrap() <= 4.0);
    assert!(
        settings[0]["nnz_per_item"].as_f64().unwrap()
            > settings[2]["nnz_per_item"].as_f64().unwrap()
    );
    // With this corpus no tie straddles a cut-off: the engine's counts are the oracle's.
    assert_eq!(ambiguous, 0, "ties made some counts ambiguous");
    // A top-K setting's overlap with the exact search of the full vectors: the brute-force
    // first 10 of each, compared; the exact setting itself has none.
    assert!(
        settings[0].get("t2i.overlap@10").is_none(),
        "{}",
        settings[0]
    );
    for (n, s) in settings.iter().enumerate().skip(1) {
        for (d, dir) in ["t2i", "i2t"].into_iter().enumerate() {
            let pairs: Option<Vec<(Vec<usize>, Vec<usize>)>> = firsts[n][d]
                .iter()
                .zip(&firsts[0][d])
                .map(|(ours, exact)| Some((ours.clone()?, exact.clone()?)))
                .collect();
            let pairs = pairs.expect("no tie straddles the first 10 with this corpus");
            let shares: Vec<f64> = pairs
                .iter()
                .filter(|(_, exact)| !exact.is_empty())
                .map(|(ours, exact)| {
                    exact.iter().filter(|x| ours.contains(x)).count() as f64 / exact.len() as f64
                })
                .collect();
            let want = shares.iter().sum::<f64>() / shares.len() as f64;
            let got = s[format!("{dir}.overlap@10")].as_f64().unwrap();
            assert!(
                (got - want).abs() < 1e-9,
                "{dir} overlap {got} != {want}: {s}"
            );
        }
    }
    // Top-4 documents lose some of the exact first 10 of the image queries.
    assert!(settings[2]["i2t.overlap@10"].as_f64().unwrap() < 1.0);

    // The lexicon figures of the full vectors, against the encoder's own output.
    let lexicon = &report["lexicon"];
    let side = |docs: &[BTreeMap<String, u64>], key: &str| {
        let mut nnz: Vec<usize> = docs.iter().map(|d| d.len()).collect();
        nnz.sort_unstable();
        let n = nnz.len();
        let median = if n % 2 == 1 {
            nnz[n / 2] as f64
        } else {
            (nnz[n / 2 - 1] + nnz[n / 2]) as f64 / 2.0
        };
        let share = |k: usize| {
            docs.iter()
                .map(|d| {
                    let mut w: Vec<u64> = d.values().copied().collect();
                    w.sort_unstable_by(|a, b| b.cmp(a));
                    let total: u64 = w.iter().sum();
                    w.iter().take(k).sum::<u64>() as f64 / total as f64
                })
                .sum::<f64>()
                / n as f64
        };
        let got = &lexicon[key];
        let close = |field: &str, want: f64| {
            let v = got[field].as_f64().unwrap();
            assert!(
                (v - want).abs() < 1e-9,
                "lexicon.{key}.{field}: {v} != {want}"
            );
        };
        close("nnz_median", median);
        close("nnz_mean", nnz.iter().sum::<usize>() as f64 / n as f64);
        close("top16_weight_share", share(16));
        close("top64_weight_share", share(64));
        assert_eq!(got["items"], n);
    };
    side(&images, "image");
    side(&texts, "text");
    let grounded = lexicon["caption_word_in_top10"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&grounded), "{lexicon}");

    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for label in [
        ">full<",
        ">16<",
        ">4<",
        "recall (%)",
        "index bytes per item",
    ] {
        assert!(svg.contains(label), "{label} not in the plot");
    }
}

#[test]
fn dense_mode_equals_brute_force_cosine() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path(), 5, 2, None);
    let model = clip_args();
    let report = eval(&model, &c.tsv, "--mode dense", &[]);
    assert_eq!(report["mode"], "dense");
    let settings = report["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 1);
    assert_eq!(settings[0]["top_k"], Value::Null);
    let s = &settings[0];

    let (texts, images) = texts_and_images(&model, &c, "dense");
    let texts: Vec<Vec<f64>> = texts.iter().map(unit).collect();
    let images: Vec<Vec<f64>> = images.iter().map(unit).collect();
    let (t2i_relevant, i2t_relevant) = relevant(&c);
    // f32 in the engine, f64 here: scores within 1e-5 count as ties.
    let t2i = scores(&texts, &images, |q, d| cos(q, d));
    check(s, "t2i", oracle(&t2i, &t2i_relevant, 1e-5, false), 10);
    let i2t = scores(&images, &texts, |q, d| cos(q, d));
    check(s, "i2t", oracle(&i2t, &i2t_relevant, 1e-5, false), 5);
    let dim = texts[0].len() as f64;
    assert!(s["nnz_per_item"].as_f64().unwrap() <= dim);
    assert!(s["nnz_per_item"].as_f64().unwrap() > 0.0);
    // A dense collection stores dim floats per item at least.
    assert!(s["bytes_per_item"].as_f64().unwrap() > 4.0 * dim, "{s}");
    // No sweep for dense vectors.
    let out = lexlip(&eval_line(
        &model,
        "--mode dense --top-k 8",
        &[("--tsv", &c.tsv)],
    ));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("dense mode has one setting"));
}

/// One image and its two captions: every query has exactly one possible answer, so every
/// recall is 1 (the image and its captions share terms, as the tiny model's dense-ish vectors
/// always do). Also the table printed without --json.
#[test]
fn one_image_is_always_found() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path(), 1, 2, None);
    // A work directory that does not exist yet is made, and left empty.
    let work = tmp.path().join("work/nested");
    let report = eval(&lexlip_tiny_args(), &c.tsv, "", &[("--work-dir", &work)]);
    assert_eq!(std::fs::read_dir(&work).unwrap().count(), 0);
    let s = &report["settings"][0];
    for key in [
        "t2i.r@1", "t2i.r@5", "t2i.r@10", "i2t.r@1", "i2t.r@5", "i2t.r@10",
    ] {
        assert_eq!(s[key], 1.0, "{key}: {report}");
    }
    let out = lexlip(&eval_line(&lexlip_tiny_args(), "", &[("--tsv", &c.tsv)]));
    lexlip_tests::assert_success(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("T2I R@1") && table.contains("I2T R@1"),
        "{table}"
    );
    let full = table
        .lines()
        .find(|l| l.starts_with("full"))
        .expect("a full row");
    assert!(full.contains("100.0"), "{full}");
}

/// A test TSV in `dir`: picture `i` (`img/i.png`, `picture(i)`) with the one caption
/// `captions[i]`.
fn one_caption_each(dir: &Path, captions: &[&str], picture: impl Fn(usize) -> Vec<u8>) -> PathBuf {
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut tsv = String::from("title\tfilepath\timage_id\n");
    for (i, caption) in captions.iter().enumerate() {
        std::fs::write(dir.join(format!("img/{i}.png")), picture(i)).unwrap();
        tsv.push_str(&format!("{caption}\timg/{i}.png\tim{i}\n"));
    }
    let path = dir.join("test.tsv");
    std::fs::write(&path, tsv).unwrap();
    path
}

/// `--relevance caption` on a corpus that repeats a caption: three pictures say "a red dog",
/// one "a blue cat". Each wording is asked once, and with four pictures every one is among the
/// first ten, so every query is answered by R@10; the item rule asks all four captions.
#[test]
fn repeated_captions_are_asked_once() {
    let tmp = tempfile::tempdir().unwrap();
    let captions = ["a red dog", "A red  dog", "a red dog", "a blue cat"];
    let path = one_caption_each(tmp.path(), &captions, |i| png(i as u32 * 7 + 1, 32));
    let by_item = eval(&lexlip_tiny_args(), &path, "", &[]);
    let by_caption = eval(&lexlip_tiny_args(), &path, "--relevance caption", &[]);
    assert_eq!(by_item["relevance"], "item", "{by_item}");
    assert_eq!(by_caption["relevance"], "caption", "{by_caption}");
    let (item, caption) = (&by_item["settings"][0], &by_caption["settings"][0]);
    assert_eq!(
        (item["t2i.queries"].as_u64(), item["i2t.queries"].as_u64()),
        (Some(4), Some(4))
    );
    assert_eq!(
        (
            caption["t2i.queries"].as_u64(),
            caption["i2t.queries"].as_u64()
        ),
        (Some(2), Some(4))
    );
    // The report counts the queries each rule asks.
    assert_eq!(by_item["t2i_queries"], 4, "{by_item}");
    assert_eq!(by_caption["t2i_queries"], 2, "{by_caption}");
    assert_eq!(by_caption["i2t_queries"], 4, "{by_caption}");
    assert_eq!(caption["t2i.r@10"], 1.0, "{by_caption}");
    assert_eq!(caption["i2t.r@10"], 1.0, "{by_caption}");
    // More answers per query can only raise recall: image → text asks the same four queries,
    // and the three dog captions encode alike (an uncased tokenizer), so text → image's one
    // dog query stands for the three of the item rule.
    for key in ["t2i.r@1", "i2t.r@1"] {
        assert!(
            caption[key].as_f64() >= item[key].as_f64(),
            "{key}: {by_item} {by_caption}"
        );
    }
    fails(
        &eval_line(&[], "--relevance concept", &[("--tsv", &path)]),
        "concept",
    );
}

/// `--relevance picture` on two names drawn with one file: both pictures encode alike and tie,
/// so by the item rule exactly one of the two captions finds its own picture first (and one
/// picture its own caption); by the picture rule either picture answers, and every query does.
#[test]
fn identical_pictures_answer_for_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let captions = ["flag of france", "flag of clipperton island"];
    let path = one_caption_each(tmp.path(), &captions, |_| png(8, 32));
    let by_item = eval(&lexlip_tiny_args(), &path, "", &[]);
    let by_picture = eval(&lexlip_tiny_args(), &path, "--relevance picture", &[]);
    assert_eq!(by_picture["relevance"], "picture", "{by_picture}");
    let (item, picture) = (&by_item["settings"][0], &by_picture["settings"][0]);
    for dir in ["t2i", "i2t"] {
        assert_eq!(item[format!("{dir}.queries")], 2, "{by_item}");
        assert_eq!(picture[format!("{dir}.queries")], 2, "{by_picture}");
        assert_eq!(item[format!("{dir}.r@1")], 0.5, "{dir}: {by_item}");
        assert_eq!(picture[format!("{dir}.r@1")], 1.0, "{dir}: {by_picture}");
    }
}

fn fails(args: &[OsString], message: &str) {
    let out = lexlip(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "lexlip {args:?} succeeded");
    assert!(stderr.contains(message), "{message:?} not in: {stderr}");
}

/// `lexlip eval --tsv CORPUS WORDS FLAGS` with the `model` flags must fail, saying `message`.
fn tsv_fails(model: &[String], corpus: &Path, words: &str, flags: &Flags, message: &str) {
    let mut args = eval_line(model, words, &[("--tsv", &corpus)]);
    args.extend(line("", flags));
    fails(&args, message);
}

#[test]
fn bad_inputs_are_clear_errors_or_counted() {
    let tmp = tempfile::tempdir().unwrap();
    // A missing corpus file: an error naming it.
    let tiny = lexlip_tiny_args();
    let nowhere = tmp.path().join("nowhere.tsv");
    tsv_fails(&tiny, &nowhere, "", &[], "nowhere.tsv");
    // A corpus with no rows: nothing to evaluate.
    let empty = tmp.path().join("empty.tsv");
    std::fs::write(&empty, "title\tfilepath\timage_id\n").unwrap();
    tsv_fails(&tiny, &empty, "", &[], "nothing to evaluate");
    // A text-only model cannot encode the images.
    let c = corpus(&tmp.path().join("c"), 4, 2, Some(2));
    tsv_fails(
        &model_flag(&splade_dir()),
        &c.tsv,
        "",
        &[],
        "no image encoder",
    );
    // A work directory that cannot be made (under a file): an error naming it.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let blocked = file.join("work");
    tsv_fails(
        &tiny,
        &c.tsv,
        "",
        &[("--work-dir", &blocked)],
        "a-file/work",
    );
    // A plot with no directory to go in: refused before anything is encoded.
    let plot = tmp.path().join("nowhere/plot.svg");
    tsv_fails(&tiny, &c.tsv, "", &[("--plot", &plot)], "no directory");
    // A model without a dense encoder in dense mode.
    tsv_fails(&tiny, &c.tsv, "--mode dense", &[], "no dense encoder");
    // A missing image is skipped and counted like `lexlip index` counts it; its captions have
    // no answer and are left out (counted too); the rest is evaluated.
    let report = eval(&tiny, &c.tsv, "", &[]);
    assert_eq!(report["skipped"]["missing_file"], 1, "{report}");
    assert_eq!(report["skipped"]["image_skipped"], 2, "{report}");
    assert_eq!(report["read"], 4 + 8);
    assert_eq!(report["images"], 3);
    assert_eq!(report["captions"], 6);
    assert_eq!(report["t2i_queries"], 6);
}

/// `--webdataset` reads a corpus as `lexlip index` does (pictures composed from the test
/// corpus's images by `lexlip bench compose`); `--approx` and `--term-cut` add settings on the
/// full vectors after the exact one, whose hits are scored exactly, so they can only lose
/// recall; `--hnsw` adds the dense graph after the dense scan (on five vectors it finds what
/// the scan finds); `--idf` is recorded in the report. Knobs of the other mode and factors that
/// mean nothing are refused.
#[test]
fn approximate_settings_over_webdataset_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(&tmp.path().join("c"), 5, 1, None);
    let shards = tmp.path().join("shards");
    let items = c.captions.iter().map(|(text, i)| {
        let rel = c.images[*i].0.strip_prefix(tmp.path().join("c")).unwrap();
        (rel.to_path_buf(), text.clone())
    });
    let sources = tmp.path().join("c/sources.jsonl");
    lexlip_tests::compose_shards(&sources, items, &shards, "--images 6 --size 32");
    let tiny = lexlip_tiny_args();
    let wds = |model: &[String], words: &str| eval_line(model, words, &[("--webdataset", &shards)]);
    let report = lexlip_json(&wds(&tiny, "--approx 1.5,1.2 --term-cut 0.2 --json"));
    assert_eq!(
        (report["images"].clone(), report["captions"].clone()),
        (6.into(), 6.into())
    );
    let settings = report["settings"].as_array().unwrap();
    let how: Vec<(Value, Value, Value)> = settings
        .iter()
        .map(|s| {
            (
                s["search"].clone(),
                s["approx"].clone(),
                s["term_cut"].clone(),
            )
        })
        .collect();
    let f = |x: f64| Value::from(x as f32);
    assert_eq!(
        how,
        [
            ("exact".into(), Value::Null, Value::Null),
            ("approx".into(), f(1.2), Value::Null),
            ("approx".into(), f(1.5), Value::Null),
            ("approx".into(), f(1.0), f(0.2)),
        ]
    );
    for s in &settings[1..] {
        for key in ["t2i.r@1", "t2i.r@10", "i2t.r@1", "i2t.r@10"] {
            assert!(s[key].as_f64() <= settings[0][key].as_f64(), "{key}: {s}");
        }
        for key in ["t2i.overlap@10", "i2t.overlap@10"] {
            let share = s[key].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&share), "{key}: {s}");
        }
    }

    let clip = clip_args();
    let report = lexlip_json(&wds(&clip, "--mode dense --hnsw --json"));
    let settings = report["settings"].as_array().unwrap();
    assert_eq!(settings.len(), 2, "{report}");
    assert_eq!(
        (
            settings[0]["search"].as_str(),
            settings[1]["search"].as_str()
        ),
        (Some("exact"), Some("hnsw"))
    );
    for key in ["t2i.r@1", "t2i.r@10", "i2t.r@1", "i2t.r@10"] {
        assert_eq!(settings[0][key], settings[1][key], "{key}");
    }
    for key in ["t2i.overlap@10", "i2t.overlap@10"] {
        assert_eq!(settings[1][key], 1.0, "{key}: {}", settings[1]);
    }

    // IDF-weighted queries: the report says so; recall stays a share.
    let report = lexlip_json(&wds(&tiny, "--idf 1 --json"));
    assert_eq!(report["idf"], 1.0, "{report}");
    let r = report["settings"][0]["t2i.r@10"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&r), "{report}");
    for (model, words, message) in [
        (&tiny, "--idf 5", "idf must be"),
        (&clip, "--mode dense --idf 1", "--idf"),
        (&tiny, "--approx 1", "above 1"),
        (&tiny, "--term-cut 1.5", "below 1"),
        (&tiny, "--hnsw", "--mode dense"),
        (&clip, "--mode dense --approx 1.2", "--hnsw"),
    ] {
        fails(&wds(model, words), message);
    }
    let nowhere = tmp.path().join("nowhere");
    fails(
        &eval_line(&tiny, "", &[("--webdataset", &nowhere)]),
        "nowhere",
    );
}

/// The figures of a report that do not depend on time or on where the vectors came from.
fn figures(report: &Value) -> Value {
    let settings: Vec<Value> = report["settings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let kept: serde_json::Map<String, Value> = s
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !k.contains("qps") && !k.contains("seconds"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            Value::Object(kept)
        })
        .collect();
    serde_json::json!({
        "images": report["images"],
        "captions": report["captions"],
        "t2i_queries": report["t2i_queries"],
        "i2t_queries": report["i2t_queries"],
        "lexicon": report["lexicon"],
        "settings": settings,
    })
}

/// Asserts that two reports have the same [`figures`], naming the ones that differ.
fn same_figures(a: &Value, b: &Value) {
    let (a, b) = (figures(a), figures(b));
    let mut differ = Vec::new();
    for key in [
        "images",
        "captions",
        "t2i_queries",
        "i2t_queries",
        "lexicon",
    ] {
        if a[key] != b[key] {
            differ.push(format!("{key}: {} against {}", a[key], b[key]));
        }
    }
    let (sa, sb) = (
        a["settings"].as_array().unwrap(),
        b["settings"].as_array().unwrap(),
    );
    assert_eq!(sa.len(), sb.len());
    for (n, (x, y)) in sa.iter().zip(sb).enumerate() {
        for (k, v) in x.as_object().unwrap() {
            // A collection's files are the same up to a few bytes of tantivy's metadata.
            let near = |a: f64, b: f64| (a - b).abs() <= 1e-3 * a.abs().max(b.abs());
            let sizes_near = k.contains("bytes")
                && matches!((v.as_f64(), y[k].as_f64()), (Some(a), Some(b)) if near(a, b));
            if y[k] != *v && !sizes_near {
                differ.push(format!("setting {n} {k}: {v} against {}", y[k]));
            }
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
}

/// `--collection`: what `lexlip index` stored evaluates as the corpus itself: every sparse
/// setting's recalls, overlaps, sizes and lexicon figures, and the dense vectors of a collection
/// indexed with a dense model beside the lexicons. A collection without dense vectors is refused
/// for --mode dense, and a folder that is no collection before the model loads.
#[test]
fn a_collection_evaluates_like_its_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(tmp.path(), 6, 2, None);
    let tiny = lexlip_tiny_args();
    let clip = clip_args();
    let both = tmp.path().join("both");
    index_tsv(&both, &c.tsv, &tiny, "", &[("--dense-model", &clip_dir())]);
    let eval_collection = |model: &[String], dir: &Path, words: &str| {
        lexlip_json(&eval_line(
            model,
            &format!("{words} --json"),
            &[("--collection", &dir)],
        ))
    };

    let sweep = "--top-k 4 --approx 1.5";
    let corpus_report = eval(&tiny, &c.tsv, sweep, &[]);
    let stored = eval_collection(&tiny, &both, sweep);
    assert_eq!(stored["corpus"], both.display().to_string());
    assert_eq!(stored["settings"].as_array().unwrap().len(), 4, "{stored}");
    same_figures(&stored, &corpus_report);
    // Each approximate search shares its exact one's collection; the top-4 has its own.
    let built = |n: usize| stored["settings"][n]["index_seconds"].as_f64().unwrap();
    assert_eq!(built(1), built(0), "{stored}");
    assert_ne!(built(2), built(0), "{stored}");
    assert_eq!(built(3), built(2), "{stored}");

    let dense = "--mode dense";
    same_figures(
        &eval_collection(&clip, &both, dense),
        &eval(&clip, &c.tsv, dense, &[]),
    );

    let sparse_only = tmp.path().join("sparse");
    index_tsv(&sparse_only, &c.tsv, &tiny, "", &[]);
    let dense_of = |dir: &Path| eval_line(&clip, dense, &[("--collection", &dir)]);
    fails(&dense_of(&sparse_only), "index it with --dense");
    let nowhere = tmp.path().join("nowhere");
    fails(&dense_of(&nowhere), "not a collection lexlip index made");
}

/// `--distractors`: a test corpus searched among another collection's pictures and captions.
/// Its recalls equal brute force over both, counting only the corpus's own answers (sparse:
/// the tiny LexLIP impacts; dense: the tiny CLIP's cosines); the distractors are never asked,
/// the report counts them apart, and they do push answers down. A collection of another model,
/// one without dense vectors for --mode dense, and single-modal recall are refused.
#[test]
fn distractors_join_every_search_and_answer_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(&tmp.path().join("test"), 6, 2, None);
    // Other pictures (numbers 6..16), one caption each, ids that the corpus also uses.
    let d = corpus_from(&tmp.path().join("others"), 6, 10, 1, None);
    let tiny = lexlip_tiny_args();
    let clip = clip_args();
    let both = tmp.path().join("both");
    index_tsv(&both, &d.tsv, &tiny, "", &[("--dense-model", &clip_dir())]);
    let both_arg = both.display().to_string();

    // Sparse: brute-force dot products of the encoder's outputs over the corpus and the others.
    let report = eval(&tiny, &c.tsv, "", &[("--distractors", &both)]);
    assert_eq!(report["images"], 6, "{report}");
    assert_eq!(report["captions"], 12);
    assert_eq!(report["t2i_queries"], 12);
    assert_eq!(report["i2t_queries"], 6);
    assert_eq!(report["distractors"]["collection"], both_arg.as_str());
    assert_eq!(report["distractors"]["images"], 10);
    assert_eq!(report["distractors"]["captions"], 10);
    let sparse = |v: Vec<Value>| v.iter().map(impacts).collect::<Vec<_>>();
    let (texts, images) = texts_and_images(&tiny, &c, "terms");
    let (texts, images) = (sparse(texts), sparse(images));
    let (other_texts, other_images) = texts_and_images(&tiny, &d, "terms");
    let (other_texts, other_images) = (sparse(other_texts), sparse(other_images));
    let (t2i_relevant, i2t_relevant) = relevant(&c);
    let t2i_among = scores(&texts, &joined(&images, &other_images), dot);
    let i2t_among = scores(&images, &joined(&texts, &other_texts), dot);
    let t2i = oracle(&t2i_among, &t2i_relevant, 0.0, true);
    let i2t = oracle(&i2t_among, &i2t_relevant, 0.0, true);
    let s = &report["settings"][0];
    let ambiguous = check(s, "t2i", t2i, 12) + check(s, "i2t", i2t, 6);
    assert_eq!(ambiguous, 0, "ties made some counts ambiguous");
    // The distractors matter: without them the oracle finds more.
    let alone_t2i = oracle(&scores(&texts, &images, dot), &t2i_relevant, 0.0, true);
    let alone_i2t = oracle(&scores(&images, &texts, dot), &i2t_relevant, 0.0, true);
    assert!(
        t2i[0].1 < alone_t2i[0].1 || i2t[0].1 < alone_i2t[0].1,
        "no distractor outranks an answer: {t2i:?} {alone_t2i:?} {i2t:?} {alone_i2t:?}"
    );
    // The lexicon figures are the corpus's alone.
    let alone = eval(&tiny, &c.tsv, "", &[]);
    assert_eq!(report["lexicon"], alone["lexicon"]);
    assert!(alone.get("distractors").is_none(), "{alone}");

    // Dense: cosines of the unit vectors, the distractors' as the collection stored them.
    let report = eval(&clip, &c.tsv, "--mode dense", &[("--distractors", &both)]);
    assert_eq!(report["distractors"]["images"], 10, "{report}");
    let units = |v: Vec<Value>| v.iter().map(unit).collect::<Vec<_>>();
    let (texts, images) = texts_and_images(&clip, &c, "dense");
    let (texts, images) = (units(texts), units(images));
    let (other_texts, other_images) = texts_and_images(&clip, &d, "dense");
    let (other_texts, other_images) = (units(other_texts), units(other_images));
    let cosine = |a: &Vec<f64>, b: &Vec<f64>| cos(a, b);
    let t2i_among = scores(&texts, &joined(&images, &other_images), cosine);
    let i2t_among = scores(&images, &joined(&texts, &other_texts), cosine);
    let s = &report["settings"][0];
    // f32 in the engine, f64 here: scores within 1e-5 count as ties.
    check(s, "t2i", oracle(&t2i_among, &t2i_relevant, 1e-5, false), 12);
    check(s, "i2t", oracle(&i2t_among, &i2t_relevant, 1e-5, false), 6);

    // Refused: distractors quantized otherwise, a sparse-only collection for --mode dense, a
    // folder that is no collection (before the model loads), and single-modal recall.
    let sparse_only = tmp.path().join("sparse");
    index_tsv(&sparse_only, &d.tsv, &tiny, "--scale 50", &[]);
    let refused = |model: &[String], words: &str, among: &Path, message: &str| {
        tsv_fails(model, &c.tsv, words, &[("--distractors", &among)], message);
    };
    refused(&tiny, "", &sparse_only, "quantized with scale 50");
    refused(&clip, "--mode dense", &sparse_only, "index it with --dense");
    let nowhere = tmp.path().join("nowhere");
    refused(&tiny, "", &nowhere, "--distractors");
    refused(&tiny, "", &nowhere, "not a collection lexlip index made");
    refused(&tiny, "--single-modal", &both, "cannot be used with");
}

/// `models/emoji-lex-compose` with its heads cut to `image_k` image and `text_k` text terms, in
/// `dir` (the weights linked, not copied): other heads over the same backbone.
fn heads_cut_to(dir: &Path, image_k: usize, text_k: usize) -> Vec<String> {
    let shipped = lexlip_tests::workspace().join("models/emoji-lex-compose");
    std::fs::create_dir_all(dir.join("heads")).unwrap();
    std::os::unix::fs::symlink(shipped.join("dense"), dir.join("dense")).unwrap();
    for file in ["heads/model.safetensors", "tokenizer.json"] {
        std::os::unix::fs::symlink(shipped.join(file), dir.join(file)).unwrap();
    }
    let edit = |file: &str, keys: &[(&str, usize)]| {
        let mut json: Value =
            serde_json::from_slice(&std::fs::read(shipped.join(file)).unwrap()).unwrap();
        for (key, k) in keys {
            json[*key] = (*k).into();
        }
        std::fs::write(dir.join(file), json.to_string()).unwrap();
    };
    edit("lexlip.json", &[("image_top_k", image_k)]);
    edit(
        "heads/config.json",
        &[("image_top_k", image_k), ("text_top_k", text_k)],
    );
    model_flag(dir)
}

/// `--distractors-from-dense`: lexicons computed by other heads from the dense vectors a
/// collection stores evaluate exactly as a collection those heads indexed (the shipped
/// emoji-lex-compose's heads, 64 image terms, against the same heads cut to 8 and 4). A
/// collection of another backbone, a dense evaluation and a missing --distractors are refused.
#[test]
fn distractors_from_dense_equal_the_heads_indexing_them() {
    let tmp = tempfile::tempdir().unwrap();
    let c = corpus(&tmp.path().join("test"), 6, 2, None);
    let d = corpus_from(&tmp.path().join("others"), 6, 10, 1, None);
    let shipped = model_flag(&lexlip_tests::workspace().join("models/emoji-lex-compose"));
    let cut = heads_cut_to(&tmp.path().join("cut"), 8, 4);
    let (by_shipped, by_cut) = (tmp.path().join("by-shipped"), tmp.path().join("by-cut"));
    index_tsv(&by_shipped, &d.tsv, &shipped, "--dense", &[]);
    index_tsv(&by_cut, &d.tsv, &cut, "--dense", &[]);

    // `heads` among a collection they indexed, and among the shipped heads' collection with
    // lexicons computed from its dense vectors: the same figures.
    let indexed_and_from_dense = |heads: &[String], by_heads: &Path| {
        let indexed = eval(heads, &c.tsv, "--top-k 4", &[("--distractors", &by_heads)]);
        let from_dense = eval(
            heads,
            &c.tsv,
            "--distractors-from-dense --top-k 4",
            &[("--distractors", &by_shipped)],
        );
        same_figures(&indexed, &from_dense);
        (indexed, from_dense)
    };
    let (indexed, from_dense) = indexed_and_from_dense(&cut, &by_cut);
    assert_eq!(from_dense["distractors"]["images"], 10, "{from_dense}");
    assert_eq!(from_dense["distractors"]["captions"], 10);
    // The stored lexicons themselves (64 terms) are not what the cut heads give.
    let stored = eval(&cut, &c.tsv, "--top-k 4", &[("--distractors", &by_shipped)]);
    assert_ne!(figures(&stored)["settings"], figures(&indexed)["settings"]);
    // Heads that lift a stored caption's own words (`document_floor`) read the captions'
    // words as well as the dense vectors: the same figures as a collection they indexed.
    let floor_dir = tmp.path().join("floor");
    let floor = heads_cut_to(&floor_dir, 8, 4);
    let json_path = floor_dir.join("lexlip.json");
    let mut json: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    json["text_terms"] =
        serde_json::json!({"expansion": 2, "own_floor": 0.5, "document_floor": 0.5});
    std::fs::write(&json_path, json.to_string()).unwrap();
    let by_floor = tmp.path().join("by-floor");
    index_tsv(&by_floor, &d.tsv, &floor, "--dense", &[]);
    indexed_and_from_dense(&floor, &by_floor);

    // Refused: dense vectors of another backbone (the tiny CLIP's), a dense evaluation, and
    // the flag without --distractors.
    let other = tmp.path().join("other-backbone");
    let tiny = lexlip_tiny_args();
    index_tsv(&other, &d.tsv, &tiny, "", &[("--dense-model", &clip_dir())]);
    let flag = "--distractors-from-dense";
    tsv_fails(
        &cut,
        &c.tsv,
        flag,
        &[("--distractors", &other)],
        "not those of this model's backbone",
    );
    tsv_fails(
        &cut,
        &c.tsv,
        &format!("--mode dense {flag}"),
        &[("--distractors", &by_shipped)],
        "leave out --mode dense",
    );
    tsv_fails(&cut, &c.tsv, flag, &[], "--distractors <DIR>");
}
