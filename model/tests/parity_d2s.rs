//! D2S against its authors' reference code (`scripts/make_d2s_fixtures.py`: a tiny random D2S
//! head built and saved by github.com/thongnt99/lsr-multimodal itself, over the tiny BLIP of
//! `make_blip_fixtures.py`): the head's lexicons of unit vectors, and the paired model's
//! lexicons of texts (restricted to their own words, and expanded) and images, within 1e-4.

mod common;

use std::path::Path;

use common::*;
use lexlip_model::heads::{Heads, HeadsKind};
use lexlip_model::text::TextTerms;
use lexlip_model::{Device, Encoders, LoadOptions, ModelError, Weights};
use lexlip_proto::SparseVector;
use serde_json::Value;

fn d2s_dir() -> std::path::PathBuf {
    fixtures().join("d2s-tiny")
}

/// A lexicon of thousands of terms against the fixture's summary of it: how many terms, their
/// sum, the 64 strongest. Returns the largest difference of those weights.
fn same_summary(ours: &[f32], want: &Value, what: &str) -> f32 {
    let terms = ours.iter().filter(|w| **w > 0.0).count();
    assert_eq!(
        terms as u64,
        want["terms"].as_u64().unwrap(),
        "{what}: terms"
    );
    let sum: f64 = ours.iter().map(|&w| f64::from(w)).sum();
    let want_sum = want["sum"].as_f64().unwrap();
    assert!(
        (sum - want_sum).abs() < 1e-2,
        "{what}: sum {sum} vs {want_sum}"
    );
    let mut worst = 0f32;
    for (i, w) in usizes(&want["top"]["ids"])
        .into_iter()
        .zip(f32s(&want["top"]["weights"]))
    {
        worst = worst.max((ours[i] - w).abs());
    }
    assert!(worst <= TOL, "{what}: top weights differ by {worst}");
    worst
}

fn dense_row(v: &SparseVector, tokens: &[String]) -> Vec<f32> {
    dense_of(v, tokens)
}

#[test]
fn the_head_maps_embeddings_as_the_reference() {
    let heads = Heads::load(&d2s_dir(), &Device::Cpu).unwrap();
    assert_eq!(heads.kind, HeadsKind::D2s);
    assert_eq!((heads.config.vocab_size, heads.config.dim), (30522, 16));
    let fx = fixture_json("d2s.json");
    let mut worst = 0f32;
    for case in fx["dense"].as_array().unwrap() {
        let x = f32s(&case["embedding"]);
        let x = lexlip_model::heads::rows_tensor(
            &[lexlip_proto::DenseVector::new(x).unwrap()],
            &Device::Cpu,
        )
        .unwrap();
        let weights = heads.image.weights(&x).unwrap().to_vec2::<f32>().unwrap();
        worst = worst.max(same_summary(&weights[0], &case["lexicon"], "head"));
        // The host path the index uses gives the same lexicon.
        let rows = heads.image.sparse_rows(&x, None).unwrap();
        assert_eq!(
            rows[0].len(),
            case["lexicon"]["terms"].as_u64().unwrap() as usize
        );
    }
    eprintln!("D2S head parity: max diff {worst:e}");
}

/// The paired model (`lexlip model pair`'s directory) of the fixtures: D2S over the tiny BLIP.
fn paired(out: &Path) -> Encoders {
    lexlip_model::pair::write(&lexlip_model::pair::Pair {
        heads: &d2s_dir(),
        dense: &fixtures().join("blip-tiny"),
        tokenizer: Some(&splade_dir().join("tokenizer.json")),
        out,
        names: ("d2s-tiny", "blip-tiny"),
    })
    .unwrap();
    Encoders::load(out, &Device::Cpu).unwrap()
}

#[test]
fn queries_keep_their_own_words_and_images_every_term_as_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("d2s-blip");
    let enc = paired(&out);
    assert!(enc.dense().is_some(), "the pair answers dense searches too");
    let text = enc.text().unwrap();
    assert_eq!(text.terms(), &TextTerms::own_only());
    let tokens = text.vocabulary().tokens().to_vec();
    let fx = fixture_json("d2s.json");
    let cases = fx["texts"].as_array().unwrap();
    let texts = strs_at(&fx["texts"], "text");
    let mut worst = 0f32;
    let dense = enc.dense().unwrap().encode_texts(&texts).unwrap();
    for (c, (v, d)) in cases
        .iter()
        .zip(text.encode(&texts).unwrap().iter().zip(&dense))
    {
        worst = worst.max(max_abs_diff(d.as_slice(), &f32s(&c["embedding"])));
        let want = dense_from_sparse_json(&c["lexicon"], tokens.len());
        let ours = dense_row(v, &tokens);
        assert_eq!(
            ours.iter().filter(|w| **w > 0.0).count(),
            want.iter().filter(|w| **w > 0.0).count(),
            "{:?}: own words kept",
            c["text"]
        );
        worst = worst.max(max_abs_diff(&ours, &want));
    }
    // The reference's expansion (no restriction): every positive term.
    let all = Encoders::load_with(
        &out,
        &Device::Cpu,
        &LoadOptions {
            text_terms: Some(TextTerms::all()),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    for (c, v) in cases
        .iter()
        .zip(all.text().unwrap().encode(&texts).unwrap())
    {
        worst = worst.max(same_summary(
            &dense_row(&v, &tokens),
            &c["expanded"],
            "expanded",
        ));
    }
    let image = enc.image().unwrap();
    for c in fx["images"].as_array().unwrap() {
        let name = c["file"].as_str().unwrap();
        let bytes = std::fs::read(fixtures().join("images").join(name)).unwrap();
        let px = image.preprocess_named(&bytes, name).unwrap();
        let sum: f64 = px.data().iter().map(|&x| f64::from(x)).sum();
        let want = c["pixels_sum"].as_f64().unwrap();
        assert!(
            (sum - want).abs() < 1e-2,
            "{name}: pixel sum {sum} vs {want}"
        );
        let (lexicons, embeddings) = image.encode_with_dense(std::slice::from_ref(&px)).unwrap();
        let embedding = &embeddings.expect("heads give their embeddings")[0];
        worst = worst.max(max_abs_diff(embedding.as_slice(), &f32s(&c["embedding"])));
        worst = worst.max(same_summary(
            &dense_row(&lexicons[0], &tokens),
            &c["lexicon"],
            name,
        ));
    }
    eprintln!("D2S over BLIP parity: max diff {worst:e}");
}

#[test]
fn a_d2s_model_alone_says_how_to_pair_it() {
    let err = Encoders::load(&d2s_dir(), &Device::Cpu).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("lexlip model pair"), "{message}");
}

#[test]
fn a_head_that_lacks_tensors_is_refused_naming_them() {
    let all = Weights::from_model_dir(&d2s_dir()).unwrap();
    let dir = copy_without_tensors(&d2s_dir(), &all, &["vocab_layer_norm.bias"]);
    let err = Heads::load(dir.path(), &Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelError::MissingTensors { .. }), "{err}");
    assert!(err.to_string().contains("vocab_layer_norm.bias"), "{err}");
}
