//! The text encoder against the Hugging Face reference on the real tiny SPLADE model
//! (fixtures/splade.json, made by scripts/make_fixtures.py).

mod common;

use common::*;
use lexlip_model::{Device, TextEncoder};

fn encoder() -> TextEncoder {
    TextEncoder::load(&splade_dir(), &Device::Cpu).expect("load the tiny SPLADE model")
}

#[test]
fn tokenization_matches_reference() {
    let enc = encoder();
    let fx = fixture_json("splade.json");
    assert_eq!(
        enc.max_length(),
        fx["max_length"].as_u64().unwrap() as usize
    );
    for case in fx["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let ids = enc.tokenize(&[text]).unwrap();
        let expected: Vec<u32> = usizes(&case["ids"]).into_iter().map(|i| i as u32).collect();
        assert_eq!(ids[0], expected, "token ids of {text:?}");
    }
}

#[test]
fn logits_and_pooled_weights_match_reference() {
    let enc = encoder();
    let tokens = enc.vocabulary().tokens().to_vec();
    let fx = fixture_json("splade.json");
    let mut worst_logit = 0f32;
    let mut worst_pooled = 0f32;
    for case in fx["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let (logits, _) = enc.logits(&[text]).unwrap();
        let logits = logits.squeeze(0).unwrap().to_vec2::<f32>().unwrap();
        let cols = usizes(&case["logit_columns"]);
        let rows = case["logits"].as_array().unwrap();
        assert_eq!(rows.len(), logits.len(), "sequence length of {text:?}");
        for (ours, theirs) in logits.iter().zip(rows) {
            let ours: Vec<f32> = cols.iter().map(|&c| ours[c]).collect();
            worst_logit = worst_logit.max(max_abs_diff(&ours, &f32s(theirs)));
        }
        let reference = dense_from_sparse_json(&case["pooled"], tokens.len());
        let v = &enc.encode(&[text]).unwrap()[0];
        worst_pooled = worst_pooled.max(max_abs_diff(&dense_of(v, &tokens), &reference));
        assert_same_impacts(&reference, v, &tokens);
    }
    assert_logits_and_pooled_within_tol("splade", worst_logit, worst_pooled);
}

#[test]
fn padded_batch_matches_reference_and_one_by_one() {
    let enc = encoder();
    let tokens = enc.vocabulary().tokens().to_vec();
    let fx = fixture_json("splade.json");
    let texts = strs_at(&fx["cases"], "text");
    let batch = enc.encode(&texts).unwrap();
    assert_eq!(batch.len(), texts.len());
    for (i, text) in texts.iter().enumerate() {
        let reference = dense_from_sparse_json(&fx["batch_pooled"][i], tokens.len());
        let d = max_abs_diff(&dense_of(&batch[i], &tokens), &reference);
        assert!(d <= TOL, "batch item {i}: {d}");
        let single = &enc.encode(&[text]).unwrap()[0];
        let d = max_abs_diff(&dense_of(single, &tokens), &dense_of(&batch[i], &tokens));
        assert!(d <= TOL, "batched vs one-by-one, item {i}: {d}");
        assert_eq!(single.quantize(100.0).len(), batch[i].quantize(100.0).len());
    }
}

#[test]
fn long_texts_are_truncated_and_max_length_is_configurable() {
    let long = "word ".repeat(500);
    let enc = encoder();
    assert_eq!(enc.tokenize(&[&long]).unwrap()[0].len(), enc.max_length());
    let enc = enc.with_max_length(128).unwrap();
    assert_eq!(enc.tokenize(&[&long]).unwrap()[0].len(), 128);
    assert!(!enc.encode(&[&long]).unwrap()[0].is_empty());
    assert!(encoder().with_max_length(1).is_err());
}

#[test]
fn empty_inputs() {
    let enc = encoder();
    assert!(enc.encode(&[]).unwrap().is_empty());
    // An empty string is [CLS] [SEP]: still a valid (if vague) vector.
    let v = enc.encode(&[""]).unwrap();
    assert_eq!(v.len(), 1);
}

#[test]
fn term_space_is_the_vocabulary() {
    let enc = encoder();
    let json = std::fs::read_to_string(splade_dir().join("tokenizer.json")).unwrap();
    let ts = lexlip_proto::TermSpace::from_tokenizer_json("x", &json).unwrap();
    assert!(enc.term_space().same_vocabulary(&ts));
    assert_eq!(enc.term_space().size, 30522);
}
