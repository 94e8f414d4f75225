//! VDR cross-modal against its authors' reference code (`scripts/make_vdr_fixtures.py`: a tiny
//! random VDR built and saved by github.com/jzhoubu/vsearch itself, its lexicons of a few texts
//! and images): the same terms and weights within 1e-4, for the default top-k, a smaller one,
//! bag of words, and the un-cut weights.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::*;
use lexlip_model::text::TextTerms;
use lexlip_model::{Device, Encoders, LoadOptions, ModelError, Weights};
use lexlip_proto::SparseVector;
use serde_json::Value;

fn vdr_dir() -> PathBuf {
    fixtures().join("vdr-tiny")
}

/// The published model takes bert-base-uncased's tokenizer; the tiny SPLADE model's has the
/// same 30,522 word pieces.
fn options() -> LoadOptions {
    LoadOptions {
        tokenizer: Some(splade_dir().join("tokenizer.json")),
        ..LoadOptions::default()
    }
}

fn load() -> Encoders {
    load_with(LoadOptions::default())
}

/// The model with these options (what a `lexlip.json` beside it would set).
fn load_with(o: LoadOptions) -> Encoders {
    let o = LoadOptions {
        tokenizer: options().tokenizer,
        ..o
    };
    Encoders::load_with(&vdr_dir(), &Device::Cpu, &o).unwrap()
}

/// `{"ids", "weights"}` of the fixture as term → weight.
fn reference(v: &Value, tokens: &[String]) -> BTreeMap<String, f32> {
    usizes(&v["ids"])
        .into_iter()
        .zip(f32s(&v["weights"]))
        .map(|(i, w)| (tokens[i].clone(), w))
        .collect()
}

/// Same terms, weights within [`TOL`]; returns the largest difference.
fn same_lexicon(ours: &SparseVector, want: &BTreeMap<String, f32>, what: &str) -> f32 {
    let got: BTreeMap<String, f32> = ours.iter().map(|(t, w)| (t.to_string(), w)).collect();
    let missing: Vec<_> = want.keys().filter(|t| !got.contains_key(*t)).collect();
    let extra: Vec<_> = got.keys().filter(|t| !want.contains_key(*t)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: terms differ: missing {missing:?}, extra {extra:?}"
    );
    let worst = want
        .iter()
        .map(|(t, w)| (got[t] - w).abs())
        .fold(0f32, f32::max);
    assert!(worst <= TOL, "{what}: weights differ by {worst}");
    worst
}

/// [`same_lexicon`] of each lexicon against its case's `key`; returns the largest difference.
fn worst_of(
    lexicons: &[SparseVector],
    cases: &[Value],
    key: &str,
    tokens: &[String],
    what: &str,
) -> f32 {
    lexicons
        .iter()
        .zip(cases)
        .map(|(v, c)| same_lexicon(v, &reference(&c[key], tokens), what))
        .fold(0f32, f32::max)
}

#[test]
fn text_lexicons_match_the_reference() {
    let enc = load();
    let text = enc.text().unwrap();
    let tokens = text.vocabulary().tokens().to_vec();
    let fx = fixture_json("vdr.json");
    let max_len = fx["max_len"].as_u64().unwrap() as usize;
    assert_eq!(text.max_length(), max_len, "the config's max_len");
    let cases = fx["texts"].as_array().unwrap();
    let texts = strs_at(&fx["texts"], "text");
    let mut worst = 0f32;
    for (c, ids) in cases.iter().zip(text.tokenize(&texts).unwrap()) {
        let mut want: Vec<u32> = usizes(&c["input_ids"]).iter().map(|&i| i as u32).collect();
        want.truncate(ids.len());
        assert_eq!(ids, want, "token ids of {:?}", c["text"]);
    }
    let batch = text.encode(&texts).unwrap();
    worst = worst.max(worst_of(&batch, cases, "lexicon", &tokens, "top-768 ∪ own"));
    // Batched equals one by one (every text padded to max_len either way).
    for (t, v) in texts.iter().zip(&batch) {
        assert_eq!(&text.encode(&[t]).unwrap()[0], v);
    }
    let top8 = load_with(LoadOptions {
        text_terms: Some(TextTerms::top_k_and_own(8)),
        ..LoadOptions::default()
    });
    let top8 = top8.text().unwrap().encode(&texts).unwrap();
    worst = worst.max(worst_of(&top8, cases, "lexicon_top8", &tokens, "top-8"));
    let bow = TextTerms {
        bow: true,
        ..TextTerms::default()
    };
    let bow = load_with(LoadOptions {
        text_terms: Some(bow),
        ..LoadOptions::default()
    });
    let bow = bow.text().unwrap().encode(&texts).unwrap();
    worst_of(&bow, cases, "bow", &tokens, "bag of words");
    // The un-cut weights: unit length, and the reference's 32 strongest terms.
    let pooled = text.pooled(&texts).unwrap().to_vec2::<f32>().unwrap();
    for (c, row) in cases.iter().zip(&pooled) {
        let norm = row.iter().map(|w| w * w).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        for (i, w) in usizes(&c["top32"]["ids"])
            .into_iter()
            .zip(f32s(&c["top32"]["weights"]))
        {
            assert!(
                (row[i] - w).abs() <= TOL,
                "{}: {} vs {w}",
                tokens[i],
                row[i]
            );
        }
    }
    eprintln!("VDR text parity: max diff {worst:e}");
}

#[test]
fn image_lexicons_match_the_reference() {
    let enc = load();
    let image = enc.image().unwrap();
    let tokens = image.vocabulary().tokens().to_vec();
    let fx = fixture_json("vdr.json");
    let mut worst = 0f32;
    let cases = fx["images"].as_array().unwrap();
    let pixels: Vec<_> = cases
        .iter()
        .map(|c| {
            let name = c["file"].as_str().unwrap();
            let bytes = std::fs::read(fixtures().join("images").join(name)).unwrap();
            image.preprocess_named(&bytes, name).unwrap()
        })
        .collect();
    for (c, px) in cases.iter().zip(&pixels) {
        let sum: f64 = px.data().iter().map(|&x| f64::from(x)).sum();
        let want = c["pixels_sum"].as_f64().unwrap();
        assert!(
            (sum - want).abs() < 1e-2,
            "{}: pixel sum {sum} vs {want}",
            c["file"]
        );
    }
    let lexicons = image.encode(&pixels).unwrap();
    for v in &lexicons {
        assert_eq!(v.len(), 768, "top-768");
    }
    worst = worst.max(worst_of(
        &lexicons,
        cases,
        "lexicon",
        &tokens,
        "image top-768",
    ));
    let top16 = load_with(LoadOptions {
        image_top_k: Some(16),
        ..LoadOptions::default()
    });
    let top16 = top16.image().unwrap().encode(&pixels).unwrap();
    worst = worst.max(worst_of(&top16, cases, "lexicon_top16", &tokens, "top-16"));
    eprintln!("VDR image parity: max diff {worst:e}");
}

#[test]
fn the_model_carries_its_own_quantization_scale() {
    let enc = load();
    assert_eq!(enc.scale(), Some(lexlip_model::vdr::QUANTIZATION_SCALE));
    // LexLIP's scale leaves a unit-length lexicon of 768 terms impacts of 0 or 1 (no order
    // among its terms); VDR's keeps every term, in order.
    let v = &enc
        .text()
        .unwrap()
        .encode(&["a dog runs on the grass"])
        .unwrap()[0];
    let distinct = |scale: f32| {
        let q = v.quantize(scale);
        let mut impacts: Vec<u32> = q.iter().map(|(_, i)| i).collect();
        impacts.sort_unstable();
        impacts.dedup();
        (q.len(), impacts.len())
    };
    let (_, at_100) = distinct(100.0);
    assert!(at_100 <= 2, "{at_100} distinct impacts at scale 100");
    let (kept, levels) = distinct(enc.scale().unwrap());
    assert_eq!(kept, v.len());
    assert!(
        levels > 50,
        "{levels} distinct impacts at the model's scale"
    );
}

#[test]
fn a_checkpoint_that_lacks_tensors_is_refused_naming_them() {
    let all = Weights::from_checkpoint(&vdr_dir().join("pytorch_model.bin")).unwrap();
    let dropped = [
        "encoder_q.ln.weight",
        "encoder_p.transformer.resblocks.1.mlp.c_fc.bias",
    ];
    let dir = copy_without_tensors(&vdr_dir(), &all, &dropped);
    let err = Encoders::load_with(dir.path(), &Device::Cpu, &options()).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensors { .. }), "{err}");
    let message = err.to_string();
    for name in dropped {
        assert!(message.contains(name), "{message}");
    }
}

#[test]
fn a_directory_without_a_tokenizer_says_where_to_get_one() {
    let err = Encoders::load(&vdr_dir(), &Device::Cpu).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("bert-base-uncased") && message.contains("--tokenizer"),
        "{message}"
    );
}
